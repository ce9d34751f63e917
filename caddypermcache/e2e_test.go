package caddypermcache

import (
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	_ "github.com/apigate/gateway/caddyjwt" // jwt_auth

	"github.com/apigate/gateway/internal/caddytester"
)

// Ports of this package (see the team brief): admin 2903, listeners 19300-19399.
const (
	e2eAdminPort = 2903
	e2eHTTPPort  = 19300
)

const e2eSecret = "permcache-e2e-secret-0123456789abcdef"

func e2eConfig(serviceURL, version string) string {
	return fmt.Sprintf(`{
	admin localhost:%d
	http_port %d
	https_port %d
	grace_period 1s
}

http://localhost:%d {
	route {
		jwt_auth {
			hmac_secret %s
			optional
		}
		permission {
			url %s
			timeout 30s
			route e2e
		}
		respond "%s {path}"
	}
}
`, e2eAdminPort, e2eHTTPPort, e2eHTTPPort+1, e2eHTTPPort, e2eSecret, serviceURL, version)
}

func e2eToken(t *testing.T, sub string, roles ...string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": sub, "roles": roles, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(e2eSecret))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestE2EReloadKeepsCache runs the real jwt_auth and permission handlers in
// an in-process Caddy, against a real permission service, and reloads the
// config: the new config answers from the old config's cache.
func TestE2EReloadKeepsCache(t *testing.T) {
	t.Cleanup(func() {
		if t.Skipped() && os.Getenv("CI") != "" {
			t.Error("CI=true: the in-process Caddy did not start, so the end-to-end test could not run")
		}
	})
	svc := newPermService(t, nil)
	tester := caddytester.Load(t, e2eAdminPort, e2eConfig(svc.URL+"/check", "v1"))

	alice := e2eToken(t, "alice", "admin", "editor")
	get := func(path, token string, status int, body string) {
		t.Helper()
		req, err := http.NewRequest("GET", fmt.Sprintf("http://localhost:%d%s", e2eHTTPPort, path), nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		tester.AssertResponse(req, status, body)
	}

	steps := []struct {
		name   string
		path   string
		token  string
		status int
		body   string
		calls  int64
	}{
		{"allow asks the service", "/allow/orders/7", alice, 200, "v1 /allow/orders/7", 1},
		{"allow is cached", "/allow/orders/7", alice, 200, "v1 /allow/orders/7", 1},
		{"deny asks the service", "/admin", alice, 403, deniedBody, 2},
		{"deny is cached", "/admin", alice, 403, deniedBody, 2},
		{"anonymous asks with an empty subject", "/allow/orders/7", "", 200, "v1 /allow/orders/7", 3},
	}
	for _, st := range steps {
		get(st.path, st.token, st.status, st.body)
		expectCalls(t, svc, st.calls)
	}
	wantFirst := CheckRequest{Subject: "alice", Roles: []string{"admin", "editor"}, Method: "GET", Host: "localhost", Path: "/allow/orders/7", Route: "e2e"}
	svc.mu.Lock()
	first, last := svc.reqs[0], svc.reqs[len(svc.reqs)-1]
	svc.mu.Unlock()
	if !reflect.DeepEqual(first, wantFirst) {
		t.Fatalf("service got %+v\nwant %+v", first, wantFirst)
	}
	if last.Subject != "" || len(last.Roles) != 0 {
		t.Fatalf("anonymous request sent %+v", last)
	}

	// reload: a changed config (the response) with the same permission settings
	tester.InitServer(e2eConfig(svc.URL+"/check", "v2"), "caddyfile")
	get("/allow/orders/7", alice, 200, "v2 /allow/orders/7")
	get("/admin", alice, 403, deniedBody)
	get("/allow/orders/7", "", 200, "v2 /allow/orders/7")
	expectCalls(t, svc, 3)
	if !strings.HasPrefix(svc.URL, "http://127.0.0.1:") {
		t.Fatalf("permission service is not on loopback: %s", svc.URL)
	}
}
