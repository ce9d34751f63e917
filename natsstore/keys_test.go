package natsstore

import (
	"regexp"
	"testing"
)

var validKVKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func TestEncodeKey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"certificates/local/example.com/example.com.crt", "certificates.local.example=2Ecom.example=2Ecom=2Ecrt"},
		{"/a//b/", "a.b"},
		{"acme/acme-v02.api.letsencrypt.org-directory/users/me@x.io/me.json",
			"acme.acme-v02=2Eapi=2Eletsencrypt=2Eorg-directory.users.me=40x=2Eio.me=2Ejson"},
		{"certificates/local/*.example.com/x", "certificates.local.=2A=2Eexample=2Ecom.x"},
		{"rate_limit/instances/6f1c.rlstate", "rate_limit.instances.6f1c=2Erlstate"},
		{"a=b/ü", "a=3Db.=C3=BC"},
		{"..", "=2E=2E"},
		{"", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got := encodeKey(tc.in)
			if got != tc.want {
				t.Fatalf("encodeKey(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if got == "" {
				return
			}
			if !validKVKey.MatchString(got) {
				t.Fatalf("%q is not a valid KV key", got)
			}
			back, err := decodeKey(got)
			if err != nil || back != normalizePath(tc.in) {
				t.Fatalf("decodeKey(%q) = %q, %v", got, back, err)
			}
		})
	}
}

func TestDecodeKeyRejects(t *testing.T) {
	for _, k := range []string{"", ".a", "a.", "a..b", "a=2", "a=zz", "a=41", "a=2F", "a/b", "a b"} {
		t.Run(k, func(t *testing.T) {
			if got, err := decodeKey(k); err == nil {
				t.Fatalf("decodeKey(%q) = %q, want error", k, got)
			}
		})
	}
}

func FuzzKeyRoundTrip(f *testing.F) {
	for _, s := range []string{"certificates/local/a.b/a.b.key", "/x//y/", "*.é", "=2E", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		k := encodeKey(p)
		if k == "" {
			if normalizePath(p) != "" {
				t.Fatalf("empty key for %q", p)
			}
			return
		}
		if !validKVKey.MatchString(k) {
			t.Fatalf("invalid KV key %q for %q", k, p)
		}
		back, err := decodeKey(k)
		if err != nil || back != normalizePath(p) {
			t.Fatalf("round trip %q -> %q -> %q, %v", p, k, back, err)
		}
	})
}

func FuzzDecodeKey(f *testing.F) {
	for _, s := range []string{"a.b", "a=2Eb", "=", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		p, err := decodeKey(k)
		if err != nil {
			return
		}
		if encodeKey(p) != k {
			t.Fatalf("decodeKey(%q) = %q, which encodes to %q", k, p, encodeKey(p))
		}
	})
}
