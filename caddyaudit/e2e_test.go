package caddyaudit_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// Ports of this package (see the team brief): admin 2904, listeners
// 19400-19499.
const (
	e2eAdminPort = 2904
	e2ePort      = 19401
	e2eSecret    = "caddyaudit-e2e-secret-0123456789abcdef0123456789"
)

type e2eReceiver struct {
	mu     sync.Mutex
	events map[string]caddyaudit.Event // by request id (at least once)
	auth   string
}

func (rc *e2eReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var evs []caddyaudit.Event
	if err := json.NewDecoder(r.Body).Decode(&evs); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	rc.mu.Lock()
	for _, e := range evs {
		rc.events[e.RequestID] = e
	}
	rc.auth = r.Header.Get("Authorization")
	rc.mu.Unlock()
}

func (rc *e2eReceiver) byPathSubject(path, subject string) (caddyaudit.Event, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, e := range rc.events {
		if e.Path == path && e.Subject == subject {
			return e, true
		}
	}
	return caddyaudit.Event{}, false
}

// TestEndToEnd runs jwt_auth + rbac + audit in process: an allowed
// request, one denied by rbac and one denied by jwt_auth each produce an
// event with the right fields, delivered to a real webhook receiver and
// to a JSON-lines file.
//
// It runs on both request paths (Caddy's and the fast path) and compares
// every response, the events the webhook received and the file's events.
func TestEndToEnd(t *testing.T) {
	pathtest.Run(t, testEndToEnd)
}

// TestEndToEndH2 is TestEndToEnd over HTTP/2 (h2c): the fast path's
// HTTP/2 engine makes the same responses and events as Caddy's.
func TestEndToEndH2(t *testing.T) {
	pathtest.RunH2(t, testEndToEnd)
}

func testEndToEnd(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	rc := &e2eReceiver{events: map[string]caddyaudit.Event{}}
	hook := httptest.NewServer(rc)
	defer hook.Close()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "order 7")
	}))
	defer upstream.Close()
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	t.Setenv("CADDYAUDIT_E2E_TOKEN", "hook-token")

	config := fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 19410
	https_port 19411
	grace_period 1s
	audit {
		sink http %[3]s/hook {
			batch_size 10
			flush_interval 20ms
			header Authorization "Bearer {env.CADDYAUDIT_E2E_TOKEN}"
		}
		sink file %[4]s {
			flush_interval 20ms
		}
	}
}

:%[2]d {
	route /orders/* {
		audit orders
		jwt_auth {
			hmac_secret %[5]s
		}
		rbac {
			roles_claim realm_access.roles
			require any admin
		}
		reverse_proxy %[6]s
	}
}
`, e2eAdminPort, e2ePort, hook.URL, file, e2eSecret, upstream.Listener.Addr().String())

	tester := p.Load(t, e2eAdminPort, config, "srv0")

	sign := func(sub string, roles ...string) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": sub, "exp": time.Now().Add(time.Hour).Unix(),
			"realm_access": map[string]any{"roles": roles},
		}).SignedString([]byte(e2eSecret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	run := fmt.Sprint(time.Now().UnixNano())
	alice, bob := "alice-"+run, "bob-"+run
	get := func(t *testing.T, path, token string) int {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", e2ePort, path), nil)
		req.RemoteAddr = "127.0.0.1"
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := tester.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rec.Add(p, p.Key(t), pathtest.Resp(resp.StatusCode, resp.Header, string(b), run, "RUN"))
		return resp.StatusCode
	}

	for _, tc := range []struct {
		name, path, subject, token string
		status                     int
		decision, reason           string
		roles                      []string
		bytes                      int64
	}{
		{"allowed", "/orders/7-" + run, alice, sign(alice, "admin"), 200, "allow", "", []string{"admin"}, 7},
		{"denied by rbac", "/orders/8-" + run, bob, sign(bob, "viewer"), 403, "deny", "missing role", []string{"viewer"}, -1},
		{"denied by jwt_auth", "/orders/9-" + run, "", "", 401, "deny", "missing token", []string{}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := get(t, tc.path, tc.token); got != tc.status {
				t.Fatalf("status %d, want %d", got, tc.status)
			}
			var ev caddyaudit.Event
			deadline := time.Now().Add(20 * time.Second)
			for {
				var ok bool
				if ev, ok = rc.byPathSubject(tc.path, tc.subject); ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no audit event reached the webhook")
				}
				time.Sleep(10 * time.Millisecond)
			}
			rec.Add(p, p.Key(t)+": webhook event", pathtest.Event(ev, run, "RUN"))
			if ev.Status != tc.status || ev.Decision != tc.decision || ev.Reason != tc.reason ||
				ev.Route != "orders" || ev.Method != "GET" || ev.RemoteIP != "127.0.0.1" || ev.RequestID == "" ||
				ev.Host == "" || ev.Time.IsZero() {
				t.Fatalf("event %+v", ev)
			}
			if tc.bytes >= 0 && ev.BytesOut != tc.bytes {
				t.Fatalf("bytes_out %d, want %d", ev.BytesOut, tc.bytes)
			}
			if tc.bytes < 0 && ev.BytesOut <= 0 {
				t.Fatalf("bytes_out %d: the JSON error body was not counted", ev.BytesOut)
			}
			if fmt.Sprint(ev.Roles) != fmt.Sprint(tc.roles) {
				t.Fatalf("roles %v, want %v", ev.Roles, tc.roles)
			}
		})
	}
	rc.mu.Lock()
	auth := rc.auth
	rc.mu.Unlock()
	if auth != "Bearer hook-token" {
		t.Fatalf("webhook Authorization %q: header placeholders not expanded", auth)
	}

	// The file sink got the same events as JSON lines.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var events []caddyaudit.Event
		for _, ev := range pathtest.ReadEvents(t, file) {
			if len(ev.Path) > len(run) && ev.Path[len(ev.Path)-len(run):] == run {
				events = append(events, ev)
			}
		}
		if len(events) >= 3 {
			for i, ev := range events {
				rec.Add(p, fmt.Sprintf("file event %d", i), pathtest.Event(ev, run, "RUN"))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("file sink has %d of 3 events", len(events))
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Stats sees both sinks.
	var names []string
	for _, s := range caddyaudit.Stats() {
		names = append(names, s.Name)
	}
	if len(names) < 2 {
		t.Fatalf("Stats = %v", names)
	}
}
