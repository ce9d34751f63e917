package caddypermcache

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseAnswer(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		cc, ct  string
		body    string
		want    Answer
		wantErr string
	}{
		{"200 empty", 200, "", "", "", Answer{Allow: true}, ""},
		{"403 empty", 403, "", "", "", Answer{}, ""},
		{"200 text", 200, "", "text/plain", "OK", Answer{Allow: true}, ""},
		{"403 text", 403, "", "text/plain", "Forbidden", Answer{}, ""},
		{"200 allow true", 200, "", "application/json", `{"allow":true}`, Answer{Allow: true}, ""},
		{"200 allow false", 200, "", "application/json", `{"allow": false, "why": "no"}`, Answer{}, ""},
		{"200 json without allow", 200, "", "", `{"ok":1}`, Answer{Allow: true}, ""},
		{"403 allow false", 403, "", "", `{"allow":false}`, Answer{}, ""},
		{"403 allow true", 403, "", "", `{"allow":true}`, Answer{}, "contradictory"},
		{"allow string", 200, "", "", `{"allow":"yes"}`, Answer{}, `"allow" is a string`},
		{"allow null", 200, "", "", `{"allow":null}`, Answer{}, "null"},
		{"broken json", 200, "", "application/json", `{"allow":tru`, Answer{}, "not a JSON object"},
		{"json type, not object", 200, "", "application/problem+json", `true`, Answer{}, "not a JSON object"},
		{"500", 500, "", "", `{"allow":true}`, Answer{}, "status 500"},
		{"401", 401, "", "", "", Answer{}, "status 401"},
		{"max-age", 200, "max-age=30", "", "", Answer{Allow: true, MaxAge: 30 * time.Second, HasMaxAge: true}, ""},
		{"max-age on deny", 403, "private, Max-Age=\"5\"", "", "", Answer{MaxAge: 5 * time.Second, HasMaxAge: true}, ""},
		{"max-age 0", 200, "max-age=0", "", "", Answer{Allow: true, HasMaxAge: true}, ""},
		{"no-store", 200, "no-store", "", "", Answer{Allow: true, NoStore: true}, ""},
		{"no-cache", 403, "no-cache, max-age=60", "", "", Answer{MaxAge: time.Minute, HasMaxAge: true, NoStore: true}, ""},
		{"bad max-age", 200, "max-age=soon", "", "", Answer{Allow: true, HasMaxAge: true}, ""},
		{"huge max-age", 200, "max-age=99999999999999999999999", "", "", Answer{Allow: true, HasMaxAge: true, MaxAge: maxAgeCap}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseAnswer(tc.status, tc.cc, tc.ct, []byte(tc.body))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseAnswer(f *testing.F) {
	f.Add(200, "max-age=5", "application/json", []byte(`{"allow":false}`))
	f.Add(403, "no-store", "", []byte("Forbidden"))
	f.Add(200, "max-age=\"", "text/plain", []byte(`{"allow":`))
	f.Add(500, "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, status int, cc, ct string, body []byte) {
		a, err := ParseAnswer(status, cc, ct, body)
		if err != nil {
			if a != (Answer{}) {
				t.Fatalf("error %v with a non-zero answer %+v", err, a)
			}
			return
		}
		if status != 200 && status != 403 {
			t.Fatalf("status %d accepted", status)
		}
		if status == 403 && a.Allow {
			t.Fatal("a 403 allowed")
		}
		if a.MaxAge < 0 || a.MaxAge > maxAgeCap || (!a.HasMaxAge && a.MaxAge != 0) {
			t.Fatalf("bad max-age %v (has %v)", a.MaxAge, a.HasMaxAge)
		}
	})
}

func TestClientCheck(t *testing.T) {
	var got CheckRequest
	var gotCT string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotCT = r.Header.Get("Content-Type")
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Errorf("decoding request: %v", err)
		}
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"allow":true,"pad":"`+strings.Repeat("x", DefaultMaxAnswerBytes)+`"}`)
		default:
			w.Header().Set("Cache-Control", "max-age=7")
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL + "/check", HTTP: &http.Client{Transport: NewTransport()}}
	ans, err := c.Check(context.Background(), CheckRequest{Subject: "alice", Method: "GET", Host: "h", Path: "/p", Route: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Allow || ans.MaxAge != 7*time.Second {
		t.Fatalf("answer %+v", ans)
	}
	want := CheckRequest{Subject: "alice", Roles: []string{}, Method: "GET", Host: "h", Path: "/p", Route: "r"}
	if !reflect.DeepEqual(got, want) || gotCT != "application/json" {
		t.Fatalf("service got %+v (%s), want %+v", got, gotCT, want)
	}
	c.URL = srv.URL + "/big"
	if _, err := c.Check(context.Background(), CheckRequest{}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized answer: err = %v", err)
	}
}
