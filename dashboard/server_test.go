package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apigate/gateway/caddydocker"
	"github.com/apigate/gateway/caddyopenapi"
)

func testServer() *Server {
	return &Server{Refresh: 2 * time.Second, Sources: Sources{
		HTTPConfig: func(context.Context) ([]byte, error) {
			return []byte(`{"servers":{"gw":{"routes":[{"handle":[{"handler":"static_response"}]}]}}}`), nil
		},
		Discovery: func() (caddydocker.Snapshot, bool) {
			return caddydocker.Snapshot{Server: "gw", EngineReachable: true, Containers: []caddydocker.Discovered{
				{Container: caddydocker.Container{ID: "0123456789abcdef", Name: "ok", Labels: map[string]string{"gateway.enable": "true", "other": "x"}},
					Service: &caddydocker.Service{Name: "ok", Upstream: "127.0.0.1:1"}},
				{Container: caddydocker.Container{ID: "fedcba", Name: "bad", Labels: map[string]string{"gateway.port": "8o"}},
					Errors: []caddydocker.LabelError{{Label: "gateway.port", Value: "8o", Reason: "not a port number"}}},
			}}, true
		},
		OpenAPI: func() []caddyopenapi.Summary {
			return []caddyopenapi.Summary{{Spec: "/etc/gateway/orders.yaml", Title: "Orders", Version: "3.1.0", Request: "dry_run",
				Operations: []caddyopenapi.OperationSummary{{Operation: "listOrders", Requests: 5, Violations: 4, WouldRefuse: 4,
					MostCommon: &caddyopenapi.CommonViolation{Location: "query.limit", Keyword: "maximum", Count: 2}}}}}
		},
		Events: func(n int) []Event {
			evs := []Event{{Status: 429, Decision: "deny", Reason: "rate limited"}, {Status: 200, Decision: "allow"}, {Status: 429}}
			if n < len(evs) {
				evs = evs[:n]
			}
			return evs
		},
	}}
}

func TestServer(t *testing.T) {
	s := testServer()
	tests := []struct {
		name, method, path string
		status             int
		ctype, contains    string
		passed             bool
	}{
		{"page", "GET", "/", 200, "text/html", `<script src="app.js" defer>`, false},
		{"script", "GET", "/app.js", 200, "text/javascript", "api/overview", false},
		{"style", "HEAD", "/app.css", 200, "text/css", "", false},
		{"overview", "GET", "/api/overview?n=1", 200, "application/json", `"refresh_ms":2000`, false},
		{"routes", "GET", "/api/routes", 200, "application/json", `"static_response"`, false},
		{"containers", "GET", "/api/containers", 200, "application/json", `"reason":"not a port number"`, false},
		{"events", "GET", "/api/events", 200, "application/json", `"rate limited"`, false},
		{"openapi", "GET", "/api/openapi", 200, "application/json", `"most_common":{"location":"query.limit","keyword":"maximum","count":2}`, false},
		{"openapi in the overview", "GET", "/api/overview", 200, "application/json", `"openapi":[{"spec":"/etc/gateway/orders.yaml"`, false},
		{"unknown api", "GET", "/api/nope", 404, "application/json", `unknown dashboard endpoint`, false},
		{"read-only", "POST", "/api/overview", 405, "application/json", `read-only`, false},
		{"not ours", "GET", "/elsewhere", 0, "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tc.method, tc.path, nil)
			served := s.Serve(rec, req, strings.SplitN(tc.path, "?", 2)[0])
			if served == tc.passed {
				t.Fatalf("served = %v", served)
			}
			if tc.passed {
				return
			}
			if rec.Code != tc.status || !strings.HasPrefix(rec.Header().Get("Content-Type"), tc.ctype) || !strings.Contains(rec.Body.String(), tc.contains) {
				t.Fatalf("%d %q %.300s", rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
			}
			if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
				t.Errorf("CSP = %q", csp)
			}
		})
	}
}

func TestOverview(t *testing.T) {
	o := testServer().Sources.Build(context.Background(), time.Second, 1)
	if o.Containers.Routed != 1 || o.Containers.Rejected != 1 || o.Containers.Items[0].Name != "bad" {
		t.Fatalf("containers: %+v (rejected ones first)", o.Containers)
	}
	if _, ok := o.Containers.Items[1].Labels["other"]; ok || o.Containers.Items[1].ID != "0123456789ab" {
		t.Errorf("only gateway.* labels and a short id: %+v", o.Containers.Items[1])
	}
	if o.RateLimited != 2 || len(o.Events) != 1 {
		t.Errorf("rate limited %d, events %d", o.RateLimited, len(o.Events))
	}
	if len(o.Routes) != 1 || o.RoutesError != "" {
		t.Errorf("routes %+v %q", o.Routes, o.RoutesError)
	}

	t.Run("sources fail or are missing", func(t *testing.T) {
		s := Sources{HTTPConfig: func(context.Context) ([]byte, error) { return nil, errors.New("admin API down") }}
		o := s.Build(context.Background(), time.Second, 10)
		b, _ := json.Marshal(o)
		if o.RoutesError != "admin API down" || o.Containers.Enabled || o.EventsEnabled || !strings.Contains(string(b), `"items":[]`) {
			t.Errorf("%s", b)
		}
	})
}

func TestHandlerPaths(t *testing.T) {
	h := &Handler{Path: "/ops", srv: testServer()}
	next := 0
	nextH := handlerFunc(func(w http.ResponseWriter, r *http.Request) error { next++; return nil })
	for _, tc := range []struct {
		path     string
		status   int
		location string
		next     bool
	}{
		{"/ops", 302, "/ops/", false},
		{"/ops/", 200, "", false},
		{"/ops/api/overview", 200, "", false},
		{"/opsx", 0, "", true},
		{"/other", 0, "", true},
	} {
		t.Run(tc.path, func(t *testing.T) {
			next = 0
			rec := httptest.NewRecorder()
			if err := h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil), nextH); err != nil {
				t.Fatal(err)
			}
			if tc.next {
				if next != 1 {
					t.Fatalf("not passed on")
				}
				return
			}
			if rec.Code != tc.status || rec.Header().Get("Location") != tc.location {
				t.Fatalf("%d %q", rec.Code, rec.Header().Get("Location"))
			}
		})
	}
}

type handlerFunc func(http.ResponseWriter, *http.Request) error

func (f handlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) error { return f(w, r) }
