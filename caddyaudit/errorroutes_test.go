package caddyaudit_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// TestErrorRoutesBytesOut: denials (jwt_auth, rbac) and an upstream error
// answered by the site's handle_errors are audited with the bytes and the
// status the client got, and the error routes see what Caddy's server
// gives them: {http.error.*} and the URI the client sent (before a
// rewrite), once.
//
// It runs on both request paths (Caddy's and the fast path) and compares
// every response (status, header fields, body) and audit event between
// them.
func TestErrorRoutesBytesOut(t *testing.T) {
	pathtest.Run(t, testErrorRoutesBytesOut)
}

func testErrorRoutesBytesOut(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "order 7")
	}))
	defer upstream.Close()
	// an address nothing listens on: reverse_proxy answers 502
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	config := fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 19420
	https_port 19421
	grace_period 1s
}

:19405 {
	handle /orders/* {
		audit errors
		jwt_auth {
			hmac_secret %[2]s
		}
		rbac {
			require any admin
		}
		reverse_proxy %[3]s
	}
	handle /rewritten/* {
		audit errors
		rewrite * /elsewhere
		jwt_auth {
			hmac_secret %[2]s
		}
		respond "never"
	}
	handle /down/* {
		audit errors
		reverse_proxy %[4]s
	}
	handle_errors {
		header Content-Type application/json
		respond `+"`"+`{"status":{http.error.status_code},"message":"{http.error.message}","uri":"{uri}","padding":"0123456789"}`+"`"+` {http.error.status_code}
	}
}
`, e2eAdminPort, e2eSecret, upstream.Listener.Addr().String(), dead)
	p.Load(t, e2eAdminPort, config, "srv0")

	run := fmt.Sprint(time.Now().UnixNano())
	ids := []string{run, "RUN", dead, "DEAD"}
	sign := func(roles ...string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u-" + run, "roles": roles,
			"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(e2eSecret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		name, path, token string
		status            int
		body              string // the client's body contains it
		decision          string
	}{
		{"jwt_auth, no token", "/orders/1-" + run, "", 401, `"message":"missing token","uri":"/orders/1-` + run + `"`, "deny"},
		{"rbac, no role", "/orders/2-" + run, sign("viewer"), 403, `"message":"missing role"`, "deny"},
		{"after a rewrite the URI the client sent", "/rewritten/3-" + run, "", 401, `"uri":"/rewritten/3-` + run + `"`, "deny"},
		{"upstream down", "/down/4-" + run, "", 502, `"status":502`, "allow"},
		{"allowed: the upstream's body", "/orders/5-" + run, sign("admin"), 200, "order 7", "allow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://127.0.0.1:19405"+tc.path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			rec.Add(p, p.Key(t), pathtest.Resp(resp.StatusCode, resp.Header, string(body), ids...))
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.body) {
				t.Fatalf("%d %s, want %d with %s", resp.StatusCode, body, tc.status, tc.body)
			}
			var ev *caddyaudit.Event
			deadline := time.Now().Add(10 * time.Second)
			for ev == nil {
				for _, e := range caddyaudit.Recent(50) {
					if e.Path == tc.path {
						e := e
						ev = &e
						break
					}
				}
				if ev == nil && time.Now().After(deadline) {
					t.Fatal("no audit event")
				}
				time.Sleep(5 * time.Millisecond)
			}
			rec.Add(p, p.Key(t)+": event", pathtest.Event(*ev, ids...))
			if ev.BytesOut != int64(len(body)) || ev.Status != tc.status || ev.Decision != tc.decision {
				t.Fatalf("event bytes_out %d, status %d, decision %s; the client got %d bytes, status %d (want decision %s)",
					ev.BytesOut, ev.Status, ev.Decision, len(body), resp.StatusCode, tc.decision)
			}
		})
	}
}
