package urls

import "testing"

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:secret@audit.example/hook?token=x#f": "https://audit.example/hook",
		"nats://u:p@n1:4222":        "nats://n1:4222",
		"http://host/path@not-user": "http://host/path@not-user",
		"user:pw@host:4222":         "host:4222",
		"http://plain/":             "http://plain/",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckHTTP(t *testing.T) {
	for _, ok := range []string{"http://a", "https://a:8443/x?y"} {
		if err := CheckHTTP("url", ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b", "ftp://a", "http://", "//a/b", "https://u:secret@/x"} {
		err := CheckHTTP("jwks_url", bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if want := "invalid jwks_url"; err.Error()[:len(want)] != want {
			t.Errorf("%q: %v", bad, err)
		}
		if contains(err.Error(), "secret") {
			t.Errorf("%q: the error shows the credential: %v", bad, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
