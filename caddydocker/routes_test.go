package caddydocker

import (
	"bytes"
	"encoding/json"
	"flag"
	"github.com/apigate/gateway/internal/planname"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/routes")

var testOpts = BuildOptions{
	Server:           "gateway",
	StreamCloseDelay: DefaultStreamCloseDelay,
	JWTAuth:          json.RawMessage(`{"handler":"jwt_auth","hmac_secret":"{env.JWT_SECRET}"}`),
	Permission:       json.RawMessage(`{"handler":"permission","url":"http://127.0.0.1:9100/check"}`),
}

var fullLabels = LabelOptions{HaveJWT: true, HavePermission: true}

func c(name string, labels ...string) Container {
	m := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		m[labels[i]] = labels[i+1]
	}
	return Container{ID: "id-" + name, Name: name, Labels: m, IP: "10.88.0.2"}
}

func hostNet(ct Container) Container { ct.HostNetwork = true; ct.IP = ""; return ct }

func with(ct Container, f func(*Container)) Container { f(&ct); return ct }

// base labels of a valid, minimal container
func base(extra ...string) []string {
	return append([]string{"gateway.enable", "true", "gateway.port", "8080",
		"gateway.router.api.path_prefix", "/api", "gateway.router.api.auth.required", "false",
		"gateway.router.api.audit", "false"}, extra...)
}

type routeCase struct {
	name       string
	containers []Container
	labelOpts  *LabelOptions
}

var routeCases = []routeCase{
	// every label, one at a time
	{name: "minimal", containers: []Container{c("orders", base()...)}},
	{name: "defaults_auth_and_audit", containers: []Container{c("orders", "gateway.enable", "true", "gateway.port", "8080", "gateway.router.api.path_prefix", "/api")}},
	{name: "name", containers: []Container{c("orders-1", base("gateway.name", "orders")...)}},
	{name: "address", containers: []Container{c("orders", base("gateway.address", "orders.internal")...)}},
	{name: "address_ipv6", containers: []Container{c("orders", base("gateway.address", "::1")...)}},
	{name: "host_network", containers: []Container{hostNet(c("orders", base()...))}},
	{name: "host", containers: []Container{c("orders", base("gateway.router.api.host", "API.example.com, www.example.com")...)}},
	{name: "methods", containers: []Container{c("orders", base("gateway.router.api.methods", "get,POST")...)}},
	{name: "strip_prefix", containers: []Container{c("orders", base("gateway.router.api.strip_prefix", "true")...)}},
	{name: "path_prefix_root", containers: []Container{c("orders", "gateway.enable", "true", "gateway.port", "8080", "gateway.router.all.path_prefix", "/", "gateway.router.all.auth.required", "false", "gateway.router.all.audit", "false", "gateway.router.all.strip_prefix", "true")}},
	{name: "path_prefix_trailing_slash", containers: []Container{c("orders", "gateway.enable", "true", "gateway.port", "8080", "gateway.router.api.path_prefix", "/api/", "gateway.router.api.auth.required", "false", "gateway.router.api.audit", "false")}},
	{name: "auth_required", containers: []Container{c("orders", base("gateway.router.api.auth.required", "true")...)}},
	{name: "auth_roles", containers: []Container{c("orders", base("gateway.router.api.auth.required", "true", "gateway.router.api.auth.roles", "admin, editor")...)}},
	{name: "rate_limit_ip", containers: []Container{c("orders", base("gateway.router.api.rate_limit", "100/1m")...)}},
	{name: "rate_limit_subject", containers: []Container{c("orders", base("gateway.router.api.rate_limit", "10/s", "gateway.router.api.auth.required", "true")...)}},
	{name: "permission", containers: []Container{c("orders", base("gateway.router.api.permission", "true", "gateway.router.api.auth.required", "true")...)}},
	{name: "audit", containers: []Container{c("orders", base("gateway.router.api.audit", "true")...)}},
	{name: "path_guard_normalize", containers: []Container{c("orders", base("gateway.router.api.path_guard", "normalize", "gateway.router.api.audit", "true")...)}},
	{name: "path_guard_off", containers: []Container{c("orders", base("gateway.router.api.path_guard", "off")...)}},
	{name: "path_guard_keep_encoded_slash", containers: []Container{c("orders", base("gateway.router.api.path_guard.keep_encoded_slash", "true")...)}},
	{name: "full_chain", containers: []Container{c("orders", "gateway.enable", "true", "gateway.port", "8080",
		"gateway.router.api.path_prefix", "/orders", "gateway.router.api.host", "api.example.com",
		"gateway.router.api.methods", "GET,POST", "gateway.router.api.strip_prefix", "true",
		"gateway.router.api.auth.roles", "admin,editor", "gateway.router.api.rate_limit", "100/1m",
		"gateway.router.api.permission", "true")}},
	{name: "several_routers", containers: []Container{c("orders", base(
		"gateway.router.admin.path_prefix", "/admin", "gateway.router.admin.auth.roles", "admin",
		"gateway.router.public.path_prefix", "/api/public", "gateway.router.public.auth.required", "false")...)}},
	{name: "two_containers_one_name", containers: []Container{
		c("orders-1", base("gateway.name", "orders")...),
		hostNet(c("orders-2", base("gateway.name", "orders", "gateway.port", "8081")...))}},
	{name: "ordering", containers: []Container{
		c("a", base("gateway.router.api.path_prefix", "/a")...),
		c("b", base("gateway.router.api.path_prefix", "/a/b/c")...),
		c("h", base("gateway.router.api.path_prefix", "/", "gateway.router.api.host", "h.example")...),
		c("m", base("gateway.router.api.path_prefix", "/a", "gateway.router.api.methods", "DELETE")...)}},
	{name: "not_enabled", containers: []Container{c("off", "gateway.enable", "false", "gateway.port", "1"), c("none", "other", "x")}},
	// health, stopping and the fleet
	{name: "unhealthy_only_503", containers: []Container{with(c("orders", base("gateway.router.api.strip_prefix", "true")...), func(x *Container) { x.Health = "unhealthy" })}},
	{name: "starting_only_503", containers: []Container{with(c("orders", base()...), func(x *Container) { x.Health = "starting" })}},
	{name: "stopping_only_503", containers: []Container{with(c("orders", base()...), func(x *Container) { x.Stopping = true })}},
	{name: "unhealthy_beside_healthy", containers: []Container{
		with(c("orders-1", base("gateway.name", "orders", "gateway.router.old.path_prefix", "/old")...), func(x *Container) { x.Health = "unhealthy"; x.IP = "10.88.0.3" }),
		with(c("orders-2", base("gateway.name", "orders")...), func(x *Container) { x.Health = "healthy" }),
		with(c("orders-3", base("gateway.name", "orders")...), func(x *Container) { x.IP = "10.88.0.4" })}},
	{name: "stopping_beside_running", containers: []Container{
		with(c("orders-1", base("gateway.name", "orders")...), func(x *Container) { x.Stopping = true; x.IP = "10.88.0.3" }),
		c("orders-2", base("gateway.name", "orders")...)}},
	{name: "health_ignore", containers: []Container{with(c("orders", base("gateway.health", "ignore")...), func(x *Container) { x.Health = "unhealthy" })}},
	{name: "bad_health", containers: []Container{c("bad", base("gateway.health", "off")...)}},
	{name: "fleet_remote", containers: []Container{
		c("orders-local", base("gateway.name", "orders")...),
		with(c("orders-b", base("gateway.name", "orders")...), func(x *Container) {
			x.Node, x.Advertise, x.Ports = "host-b", "10.0.0.6", []Port{{Private: 8080, Public: 32001}}
		}),
		with(hostNet(c("orders-c", base("gateway.name", "orders")...)), func(x *Container) { x.Node, x.Advertise = "host-c", "10.0.0.7" }),
		with(c("orders-d", base("gateway.name", "orders", "gateway.address", "10.1.0.9")...), func(x *Container) { x.Node, x.Advertise = "host-d", "10.0.0.8" }),
		with(c("orders-e", base("gateway.name", "orders", "gateway.address", "127.0.0.1")...), func(x *Container) {
			x.Node, x.Advertise, x.Ports = "host-e", "10.0.0.9", []Port{{Private: 9999, Public: 32002}}
		})}},

	// conflicts
	{name: "conflict_same_prefix", containers: []Container{
		c("zeta", base()...), c("alpha", base()...)}},
	{name: "conflict_disjoint_methods", containers: []Container{
		c("reader", base("gateway.router.api.methods", "GET")...), c("writer", base("gateway.router.api.methods", "POST")...)}},
	{name: "conflict_same_service_routers_differ", containers: []Container{
		c("orders-1", base("gateway.name", "orders")...),
		c("orders-2", base("gateway.name", "orders", "gateway.router.api.strip_prefix", "true")...)}},

	// every bad label, each beside a good container that still routes
	{name: "bad_enable", containers: []Container{c("bad", base("gateway.enable", "yes please")...), c("good", base("gateway.router.api.path_prefix", "/good")...)}},
	{name: "bad_unknown_key", containers: []Container{c("bad", base("gateway.prot", "80")...), c("good", base("gateway.router.api.path_prefix", "/good")...)}},
	{name: "bad_unknown_router_key", containers: []Container{c("bad", base("gateway.router.api.timeout", "5s")...)}},
	{name: "bad_router_name", containers: []Container{c("bad", base("gateway.router.a b.path_prefix", "/x")...)}},
	{name: "bad_name", containers: []Container{c("bad", base("gateway.name", "orders/v1")...)}},
	{name: "bad_port", containers: []Container{c("bad", base("gateway.port", "http")...), c("bad2", base("gateway.port", "70000")...)}},
	{name: "missing_port", containers: []Container{c("bad", "gateway.enable", "true", "gateway.router.api.path_prefix", "/api", "gateway.router.api.auth.required", "false")}},
	{name: "bad_address", containers: []Container{c("bad", base("gateway.address", "http://x:80")...)}},
	{name: "no_ip", containers: []Container{func() Container { x := c("bad", base()...); x.IP = ""; return x }()}},
	{name: "missing_path_prefix", containers: []Container{c("bad", "gateway.enable", "true", "gateway.port", "80", "gateway.router.api.host", "a.example", "gateway.router.api.auth.required", "false")}},
	{name: "no_router", containers: []Container{c("bad", "gateway.enable", "true", "gateway.port", "80")}},
	{name: "bad_path_prefix", containers: []Container{c("bad", base("gateway.router.api.path_prefix", "api/*")...), c("bad2", base("gateway.router.api.path_prefix", "/a/../b")...)}},
	{name: "bad_host", containers: []Container{c("bad", base("gateway.router.api.host", "a.example:8080")...)}},
	{name: "bad_methods", containers: []Container{c("bad", base("gateway.router.api.methods", "GET,P0ST")...)}},
	{name: "empty_lists", containers: []Container{c("bad", base("gateway.router.api.methods", " , ", "gateway.router.api.host", ",")...)}},
	{name: "bad_strip_prefix", containers: []Container{c("bad", base("gateway.router.api.strip_prefix", "maybe")...)}},
	{name: "bad_auth_required", containers: []Container{c("bad", base("gateway.router.api.auth.required", "sure")...)}},
	{name: "bad_auth_roles", containers: []Container{c("bad", base("gateway.router.api.auth.required", "true", "gateway.router.api.auth.roles", "admin,{evil}")...)}},
	{name: "roles_without_auth", containers: []Container{c("bad", base("gateway.router.api.auth.roles", "admin")...)}},
	{name: "bad_rate_limit", containers: []Container{
		c("bad1", base("gateway.router.api.rate_limit", "100")...),
		c("bad2", base("gateway.router.api.rate_limit", "0/1m")...),
		c("bad3", base("gateway.router.api.rate_limit", "10/forever")...)}},
	{name: "bad_permission", containers: []Container{c("bad", base("gateway.router.api.permission", "on-ish")...)}},
	{name: "bad_audit", containers: []Container{c("bad", base("gateway.router.api.audit", "2")...)}},
	{name: "bad_path_guard", containers: []Container{
		c("bad", base("gateway.router.api.path_guard", "strict")...),
		c("bad2", base("gateway.router.api.path_guard", "off", "gateway.router.api.path_guard.keep_encoded_slash", "true")...),
		c("bad3", base("gateway.router.api.path_guard.keep_encoded_slash", "yes")...),
		c("good", base("gateway.router.api.path_prefix", "/good")...)}},
	{name: "auth_without_jwt_config", labelOpts: &LabelOptions{}, containers: []Container{
		c("bad", "gateway.enable", "true", "gateway.port", "80", "gateway.router.api.path_prefix", "/api"),
		c("good", base("gateway.router.api.path_prefix", "/good")...)}},
	{name: "permission_without_config", labelOpts: &LabelOptions{HaveJWT: true}, containers: []Container{
		c("bad", base("gateway.router.api.permission", "true")...)}},

	// versions and canary releases
	{name: "versions_without_canary", containers: []Container{
		c("orders-1", base("gateway.name", "orders", "gateway.version", "v1")...),
		with(c("orders-2", base("gateway.name", "orders", "gateway.version", "v2")...), func(x *Container) { x.IP = "10.88.0.3" })}},
	{name: "canary_defaults", containers: []Container{
		c("orders-1", base("gateway.name", "orders", "gateway.version", "v1")...),
		with(c("orders-2", base("gateway.name", "orders", "gateway.version", "v2", "gateway.canary.weight", "10")...), func(x *Container) { x.IP = "10.88.0.3" })}},
	{name: "canary_every_label", containers: []Container{
		c("orders-1", base("gateway.name", "orders", "gateway.version", "1.4.0")...),
		with(c("orders-2", base("gateway.name", "orders", "gateway.version", "1.5.0-rc.1+build.7",
			"gateway.canary.weight", "10", "gateway.canary.sticky", "cookie", "gateway.canary.header", "x-canary = yes",
			"gateway.canary.step", "10", "gateway.canary.interval", "30s", "gateway.canary.min_requests", "50",
			"gateway.canary.max_error_rate", "2.5%", "gateway.canary.max_p99", "500ms", "gateway.canary.window", "2m")...), func(x *Container) { x.IP = "10.88.0.3" }),
		with(c("orders-3", base("gateway.name", "orders")...), func(x *Container) { x.IP = "10.88.0.4" })}},
	{name: "canary_labels_differ", containers: []Container{
		c("orders-1", base("gateway.name", "orders", "gateway.version", "v1")...),
		with(c("orders-2", base("gateway.name", "orders", "gateway.version", "v2", "gateway.canary.weight", "10")...), func(x *Container) { x.IP = "10.88.0.3" }),
		with(c("orders-3", base("gateway.name", "orders", "gateway.version", "v2", "gateway.canary.weight", "20")...), func(x *Container) { x.IP = "10.88.0.4" })}},
	{name: "canary_unhealthy_replica", containers: []Container{
		c("orders-1", base("gateway.name", "orders", "gateway.version", "v1")...),
		with(c("orders-2", base("gateway.name", "orders", "gateway.version", "v2", "gateway.canary.weight", "10")...), func(x *Container) { x.IP = "10.88.0.3"; x.Health = "unhealthy" })}},
	{name: "bad_canary", containers: []Container{
		c("bad-weight", base("gateway.version", "v2", "gateway.canary.weight", "101")...),
		c("bad-sticky", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.sticky", "always")...),
		c("bad-header", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.header", "X Canary")...),
		c("bad-header-value", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.header", "X-Canary=")...),
		c("bad-step", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.step", "0", "gateway.canary.interval", "30s")...),
		c("bad-step-alone", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.step", "10")...),
		c("bad-interval", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.step", "10", "gateway.canary.interval", "10ms")...),
		c("bad-min-requests", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.min_requests", "0")...),
		c("bad-max-error-rate", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.max_error_rate", "lots")...),
		c("bad-max-p99", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.max_p99", "-1s")...),
		c("bad-window", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.window", "0s")...),
		c("bad-unknown", base("gateway.version", "v2", "gateway.canary.weight", "5", "gateway.canary.speed", "fast")...),
		c("bad-no-weight", base("gateway.version", "v2", "gateway.canary.sticky", "none")...),
		c("bad-no-version", base("gateway.canary.weight", "5")...),
		c("bad-version", base("gateway.version", "v 2")...),
		c("good", base("gateway.router.api.path_prefix", "/good")...)}},
}

type golden struct {
	Errors map[string][]LabelError `json:"errors,omitempty"`
	// States are the containers that are valid but not routed here.
	States   map[string]string `json:"states,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
	Routes   []json.RawMessage `json:"routes"`
	// Versions are the services' versions (canary releases).
	Versions map[string][]VersionGroup `json:"versions,omitempty"`
}

func TestRoutesGolden(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range routeCases {
		t.Run(tc.name, func(t *testing.T) {
			if seen[tc.name] {
				t.Fatalf("duplicate case name")
			}
			seen[tc.name] = true
			lo := fullLabels
			if tc.labelOpts != nil {
				lo = *tc.labelOpts
			}
			ds := Discover(tc.containers, lo)
			plan, err := BuildRoutes(ds, testOpts)
			if err != nil {
				t.Fatal(err)
			}
			g := golden{Warnings: plan.Warnings, Routes: plan.Routes, Versions: plan.Versions}
			for _, d := range ds {
				if d.State != StateRouted && d.State != StateInvalid {
					if g.States == nil {
						g.States = map[string]string{}
					}
					g.States[d.Container.Name] = d.State + ": " + d.Reason
				}
				if len(d.Errors) > 0 {
					if g.Errors == nil {
						g.Errors = map[string][]LabelError{}
					}
					g.Errors[d.Container.Name] = d.Errors
				}
			}
			got, err := json.MarshalIndent(g, "", "\t")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "routes", tc.name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("generated routes differ from %s (run with -update after checking):\n%s", path, got)
			}
			// Every bad-label case names the label in its error.
			if strings.HasPrefix(tc.name, "bad_") || strings.HasPrefix(tc.name, "missing_") {
				if len(g.Errors) == 0 {
					t.Errorf("expected a label error")
				}
			}
			// Determinism: the reverse container order gives the same bytes.
			rev := append([]Container(nil), tc.containers...)
			for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
				rev[i], rev[j] = rev[j], rev[i]
			}
			plan2, _ := BuildRoutes(Discover(rev, lo), testOpts)
			if plan2.Hash != plan.Hash {
				t.Errorf("route hash depends on container order")
			}
		})
	}
}

func TestEnsureHandlers(t *testing.T) {
	own := json.RawMessage(`{"match":[{"host":["a"]}],"handle":[{"handler":"static_response","body":"own"}],"terminal":true}`)
	legacy := json.RawMessage(`{"@id":"docker:gateway:orders:api","handle":[{"handler":"static_response"}],"terminal":true}`)
	site := json.RawMessage(`{"match":[{"host":["b"]}],"handle":[{"handler":"subroute","routes":[{"handle":[{"handler":"encode"}]},{"handle":[{"handler":"docker_routes"}]}]}],"terminal":true}`)

	t.Run("default placement: in front, catch-all last", func(t *testing.T) {
		got := EnsureHandlers("gateway", []json.RawMessage{own})
		if len(got) != 3 || string(got[0]) != string(RoutesHandlerRoute) || !isCatchAll(got[2]) {
			t.Fatalf("unexpected: %s", got)
		}
		// the server's last own route no longer ends the chain, so what
		// it leaves unhandled reaches the catch-all
		if strings.Contains(string(got[1]), "terminal") {
			t.Fatalf("last own route keeps terminal: %s", got[1])
		}
		if again := EnsureHandlers("gateway", got); !SameRoutes(got, again) {
			t.Fatalf("not idempotent: %s", again)
		}
	})
	t.Run("a handler in a site stays where it is", func(t *testing.T) {
		got := EnsureHandlers("gateway", []json.RawMessage{site, own})
		if len(got) != 3 || HasRoutesHandler(got[1:2]) || !HasRoutesHandler(got[:1]) || !isCatchAll(got[2]) {
			t.Fatalf("unexpected: %s", got)
		}
	})
	t.Run("routes of earlier versions are dropped", func(t *testing.T) {
		legacyNoRoute := json.RawMessage(`{"@id":"docker:gateway:no_route","handle":[{"handler":"static_response","status_code":404}],"terminal":true}`)
		got := EnsureHandlers("gateway", []json.RawMessage{legacy, own, legacyNoRoute})
		if len(got) != 3 || string(got[0]) != string(RoutesHandlerRoute) {
			t.Fatalf("unexpected: %s", got)
		}
		// another server's are not
		if got := EnsureHandlers("other", []json.RawMessage{legacy}); len(got) != 3 || RouteID(got[1]) != RouteID(legacy) {
			t.Fatalf("unexpected: %s", got)
		}
	})
	t.Run("empty server", func(t *testing.T) {
		got := EnsureHandlers("gateway", nil)
		if len(got) != 2 || !HasRoutesHandler(got) || !isCatchAll(got[1]) {
			t.Fatalf("unexpected: %s", got)
		}
	})
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{"100/1m", "100/1m0s", true}, {"10/s", "10/1s", true}, {"5/30s", "5/30s", true}, {"1000/h", "1000/1h0m0s", true},
		{" 7 / 2m ", "7/2m0s", true}, {"100", "", false}, {"0/1m", "", false}, {"-1/1m", "", false},
		{"1/0s", "", false}, {"1/forever", "", false}, {"x/1m", "", false}, {"1/1000h", "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			r, err := ParseRate(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v", err)
			}
			if tc.ok && r.String() != tc.want {
				t.Fatalf("got %s want %s", r, tc.want)
			}
		})
	}
}

func FuzzParseLabels(f *testing.F) {
	f.Add("gateway.router.api.path_prefix", "/api", "gateway.port", "80")
	f.Add("gateway.router.x.rate_limit", "10/1m", "gateway.address", "::1")
	f.Add("gateway.router..host", "a,b", "gateway.name", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		ct := Container{ID: "x", Name: "x", IP: "10.0.0.1", Labels: map[string]string{"gateway.enable": "true", k1: v1, k2: v2}}
		svc, errs := ParseLabels(ct, fullLabels)
		if (svc == nil) == (len(errs) == 0) {
			t.Fatalf("exactly one of service and errors must be set: %v %v", svc, errs)
		}
		if svc != nil {
			if _, err := BuildRoutes([]Discovered{{Container: ct, Service: svc}}, testOpts); err != nil {
				t.Fatalf("valid labels did not build: %v", err)
			}
		}
	})
}

func BenchmarkBuildRoutes(b *testing.B) {
	var cs []Container
	for i := 0; i < 50; i++ {
		name := "svc" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		cs = append(cs, c(name, base("gateway.router.api.path_prefix", "/"+name, "gateway.router.api.rate_limit", "100/1m")...))
	}
	b.ReportAllocs()
	for b.Loop() {
		plan, err := BuildRoutes(Discover(cs, fullLabels), testOpts)
		if err != nil || len(plan.Routes) != 50 {
			b.Fatal(err)
		}
	}
}

// TestTrackVanished: a route that leaves the route set answers 404
// no_route (its matcher, after the live routes) until keep ends or it is
// live again; a route without a matcher never does.
func TestTrackVanished(t *testing.T) {
	build := func(cs ...Container) Plan {
		t.Helper()
		p, err := BuildRoutes(Discover(cs, fullLabels), testOpts)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	orders := c("orders", base("gateway.router.api.path_prefix", "/orders")...)
	billing := c("billing", base("gateway.router.api.path_prefix", "/billing")...)
	root := c("root", base("gateway.router.api.path_prefix", "/")...)
	vanished := map[string]VanishedRoute{}
	t0 := time.Unix(1_800_000_000, 0)
	before := build(orders, billing, root)
	trackVanished("gateway", vanished, nil, &before, time.Hour, t0)
	if len(before.Vanished) != 0 || len(before.Routes) != 3 {
		t.Fatalf("nothing vanished yet: %+v", before.Vanished)
	}

	now := build(billing)
	trackVanished("gateway", vanished, &before, &now, time.Hour, t0.Add(time.Minute))
	if len(now.Vanished) != 1 || now.Vanished[0].ID != "docker:gateway:orders:api" {
		t.Fatalf("vanished %+v, want orders only (the route without a matcher never)", now.Vanished)
	}
	last := now.Routes[len(now.Routes)-1]
	if RouteID(last) != "docker:gateway:vanished:orders:api" || !strings.Contains(string(last), `"error":"no_route","handler":"docker_answer","status":404`) ||
		!strings.Contains(string(last), `/orders/*`) {
		t.Fatalf("vanished route: %s", last)
	}
	if now.Hash != HashRoutes(now.Routes) || now.Hash == build(billing).Hash {
		t.Fatalf("the hash does not cover the vanished route")
	}

	// still gone later: kept, from the first time it went
	later := build(billing)
	trackVanished("gateway", vanished, &now, &later, time.Hour, t0.Add(30*time.Minute))
	if len(later.Vanished) != 1 || !later.Vanished[0].Since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("vanished %+v", later.Vanished)
	}
	// keep over
	expired := build(billing)
	trackVanished("gateway", vanished, &later, &expired, time.Hour, t0.Add(time.Hour+time.Minute))
	if len(expired.Vanished) != 0 || len(expired.Routes) != 1 {
		t.Fatalf("expired: %+v", expired.Vanished)
	}
	// back, then gone, then live again
	trackVanished("gateway", vanished, &before, &expired, time.Hour, t0.Add(2*time.Hour))
	again := build(orders, billing)
	trackVanished("gateway", vanished, &expired, &again, time.Hour, t0.Add(3*time.Hour))
	if len(again.Vanished) != 0 || len(vanished) != 0 {
		t.Fatalf("a live route is not vanished: %+v", again.Vanished)
	}
	// keep 0: none
	off := build(billing)
	trackVanished("gateway", vanished, &before, &off, 0, t0)
	if len(off.Vanished) != 0 {
		t.Fatalf("forget_after 0 kept %+v", off.Vanished)
	}
}

// TestScope: only containers with every scope label are discovered; a
// scope label under gateway.* is not an unknown label.
func TestScope(t *testing.T) {
	mine := c("mine", base("gateway.router.api.path_prefix", "/mine", "gateway.instance", "edge", "tier", "front")...)
	other := c("other", base("gateway.router.api.path_prefix", "/other", "gateway.instance", "internal", "tier", "front")...)
	bare := c("bare", base("gateway.router.api.path_prefix", "/bare")...)
	opts := fullLabels
	for _, s := range []string{"gateway.instance=edge", "tier"} {
		l, err := ParseScope(s)
		if err != nil {
			t.Fatal(err)
		}
		opts.Scope = append(opts.Scope, l)
	}
	ds := Discover([]Container{mine, other, bare}, opts)
	if len(ds) != 1 || ds[0].Container.Name != "mine" || ds[0].State != StateRouted || len(ds[0].Errors) != 0 {
		t.Fatalf("discovered %+v, want mine only, routed", ds)
	}
	// without the scope, gateway.instance is an unknown label
	if ds := Discover([]Container{mine}, fullLabels); len(ds) != 1 || ds[0].State != StateInvalid {
		t.Fatalf("without scope: %+v", ds)
	}
	for _, bad := range []string{"", "=x", " =x", "a b"} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) accepted", bad)
		}
	}
}

// TestRateLimitShared: a rate_limit label's route counts with the quota
// handler, a plan of its own per router (per client), in the counts
// block the app gives (RateLimitCounts: a fleet's); without one, {},
// each gateway alone.
func TestRateLimitShared(t *testing.T) {
	ds := Discover([]Container{c("orders", base("gateway.router.api.rate_limit", "10/1m")...)}, fullLabels)
	handler := func(opts BuildOptions) map[string]any {
		t.Helper()
		plan, err := BuildRoutes(ds, opts)
		if err != nil {
			t.Fatal(err)
		}
		var rt struct {
			Handle []map[string]any `json:"handle"`
		}
		if err := json.Unmarshal(plan.Routes[0], &rt); err != nil {
			t.Fatal(err)
		}
		for _, h := range rt.Handle {
			if h["handler"] == "quota" {
				return h
			}
		}
		t.Fatalf("no quota handler in %s", plan.Routes[0])
		return nil
	}
	h := handler(testOpts)
	if l, _ := json.Marshal(h["limits"]); h["plan"] != "docker_gateway_orders_api" || string(l) != `["10/1m0s"]` {
		t.Errorf("plan %v limits %s", h["plan"], l)
	}
	if c, _ := json.Marshal(h["counts"]); string(c) != `{}` {
		t.Errorf("not shared: counts %s", c)
	}
	opts := testOpts
	opts.RateLimitCounts = json.RawMessage(`{"fleet":{"bucket":"gateway_routes_rate_limit","sync_interval":"250ms"}}`)
	if c, _ := json.Marshal(handler(opts)["counts"]); string(c) != `{"fleet":{"bucket":"gateway_routes_rate_limit","sync_interval":"250ms"}}` {
		t.Errorf("counts = %s", c)
	}
}

// TestRatePlan: a router's plan name is a valid plan name, unique per
// server, service and router.
func TestRatePlan(t *testing.T) {
	long := strings.Repeat("s", 80)
	for _, tc := range []struct{ server, svc, router, want string }{
		{"gateway", "orders", "api", "docker_gateway_orders_api"},
		{"gw", "shop.v2", "api", "docker_gw_shop_v2_api"},
	} {
		if got := RatePlan(tc.server, tc.svc, tc.router); got != tc.want {
			t.Errorf("RatePlan(%q, %q, %q) = %q, want %q", tc.server, tc.svc, tc.router, got, tc.want)
		}
	}
	a, b := RatePlan("gw", long, "a"), RatePlan("gw", long, "b")
	if a == b || !planname.Valid(a) || !planname.Valid(b) {
		t.Errorf("long names %q and %q: want two valid, different plans", a, b)
	}
}
