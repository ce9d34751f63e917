package dashboard

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	_ "github.com/apigate/gateway/caddyaudit"
)

// adaptHTTP adapts a Caddyfile and returns its apps.http JSON.
func adaptHTTP(t testing.TB, caddyfile string) []byte {
	t.Helper()
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("adapting: %v", err)
	}
	var full struct {
		Apps map[string]json.RawMessage `json:"apps"`
	}
	if err := json.Unmarshal(cfg, &full); err != nil {
		t.Fatal(err)
	}
	return full.Apps["http"]
}

func rowText(r Route) string {
	var d []string
	for _, x := range r.Duties {
		if x.Detail != "" {
			d = append(d, x.Name+"("+x.Detail+")")
		} else {
			d = append(d, x.Name)
		}
	}
	s := r.Server + " | " + strings.Join(r.Match, " > ") + " | " + strings.Join(d, " ") + " | " + strings.Join(r.Upstreams, ",") + " | " + r.Source
	return s
}

func TestExtractRoutes(t *testing.T) {
	tests := []struct {
		name      string
		caddyfile string
		want      []string
	}{
		{
			name: "full duty chain in a route block, and an open route",
			caddyfile: `{
	servers :19850 {
		name gw
	}
}
:19850 {
	route /orders/* {
		audit {
			route orders
		}
		jwt_auth {
			hmac_secret s3cret-never-shown
			audience orders-api
		}
		rbac {
			require any admin editor
			require all billing
		}
		rate_limit {
			zone orders {
				key {http.auth.user.id}
				events 100
				window 1m
			}
		}
		reverse_proxy 127.0.0.1:9001 127.0.0.1:9002
	}
	handle /health {
		respond "ok" 200
	}
}`,
			want: []string{
				"gw | path /health | static_response(200) |  | config",
				"gw | path /orders/* | audit(orders) jwt_auth(aud orders-api) rbac(any admin,editor; all billing) rate_limit(100/1m) reverse_proxy | 127.0.0.1:9001,127.0.0.1:9002 | config",
			},
		},
		{
			name: "site with host, directives outside route blocks",
			caddyfile: `api.example.com:19851 {
	jwt_auth {
		hmac_secret x
		optional
	}
	reverse_proxy /v1/* 127.0.0.1:9003
	respond /health 200
}`,
			want: []string{
				"srv0 | host api.example.com > path /health | jwt_auth(optional) static_response(200) |  | config",
				"srv0 | host api.example.com > path /v1/* | jwt_auth(optional) reverse_proxy | 127.0.0.1:9003 | config",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := ExtractRoutes(adaptHTTP(t, tc.caddyfile))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, rowText(r))
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			raw, _ := json.Marshal(rs)
			if strings.Contains(string(raw), "s3cret") || strings.Contains(string(raw), "pw@") || strings.Contains(string(raw), "token=x") {
				t.Fatalf("a secret leaked into the routes: %s", raw)
			}
		})
	}
}

func TestExtractRoutesDiscovered(t *testing.T) {
	// The shape caddydocker runs: the routes of the docker_routes handler
	// (an @id, a matcher, the chain; not in the config's JSON), where the
	// handler stands, and the catch-all at the end of the server.
	discovered := json.RawMessage(`{"@id":"docker:gateway:shop:api","match":[{"path":["/shop","/shop/*"],"method":["GET"]}],"handle":[
			{"handler":"audit"},
			{"handler":"jwt_auth","hmac_secrets":["x"]},
			{"handler":"rbac","require":[{"any":["admin"]}]},
			{"handler":"quota","key":"{http.auth.user.id}","plan":"docker_gateway_shop_api","limits":["100/30s"],"counts":{"fleet":{"bucket":"gateway_routes_rate_limit"}}},
			{"handler":"permission","url":"http://user:pw@127.0.0.1:9100/check?token=x"},
			{"handler":"rewrite","strip_path_prefix":"/shop"},
			{"handler":"reverse_proxy","upstreams":[{"dial":"127.0.0.1:8080"}]}],"terminal":true}`)
	app := `{"servers":{"gateway":{"listen":[":19801"],"routes":[
		{"handle":[{"handler":"docker_routes"}]},
		{"handle":[{"handler":"static_response","status_code":200,"body":"own"}]},
		{"handle":[{"handler":"docker_routes","catch_all":true}]}
	]}}}`
	rs, err := ExtractRoutesWith([]byte(app), func(server string) []json.RawMessage {
		if server != "gateway" {
			t.Errorf("discovered routes of server %q asked", server)
		}
		return []json.RawMessage{discovered}
	})
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(rs); strings.Contains(string(raw), "pw@") || strings.Contains(string(raw), "token=x") {
		t.Fatalf("a secret leaked into the routes: %s", raw)
	}
	want := []string{
		"gateway | method GET & path /shop,/shop/* | audit jwt_auth rbac(any admin) quota(docker_gateway_shop_api 100/30s, shared by the fleet) permission(http://127.0.0.1:9100/check) rewrite reverse_proxy | 127.0.0.1:8080 | discovery",
		"gateway |  | static_response(200) |  | config",
		"gateway |  | docker_routes(catch-all: 404 no_route) |  | discovery",
	}
	var got []string
	for _, r := range rs {
		got = append(got, rowText(r))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestExtractRoutesBadInput(t *testing.T) {
	for _, in := range []string{"", "null", "{}", `{"servers":{}}`, `{"servers":{"a":{"routes":[{"handle":[1,"x",{"handler":"subroute","routes":"bad"}]}]}}}`} {
		rs, err := ExtractRoutes([]byte(in))
		if err != nil && in != `{"servers":{"a":{"routes":[{"handle":[1,"x",{"handler":"subroute","routes":"bad"}]}]}}}` {
			t.Errorf("%q: %v", in, err)
		}
		_ = rs
	}
	if _, err := ExtractRoutes([]byte("[")); err == nil || !strings.Contains(err.Error(), "apps.http") {
		t.Errorf("malformed JSON: err = %v, want one naming apps.http", err)
	}
}

func FuzzExtractRoutes(f *testing.F) {
	f.Add([]byte(`{"servers":{"a":{"routes":[{"match":[{"path":["/x"]}],"handle":[{"handler":"subroute","routes":[{"handle":[{"handler":"reverse_proxy","upstreams":[{"dial":"a:1"}]}]}]}]}]}}}`))
	f.Add([]byte(`{"servers":{"a":{"routes":[{"handle":[{"handler":"rate_limit","rate_limits":{"z":{"max_events":1,"window":"1m"}}}]}]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ExtractRoutes(b)
		if err == nil && rs == nil {
			t.Fatal("nil routes without an error")
		}
	})
}

func TestDescribeRateLimit(t *testing.T) {
	for in, want := range map[string]string{
		`{"rate_limits":{"z":{"max_events":100,"window":"1m0s"}}}`:                                        "100/1m",
		`{"rate_limits":{"b":{"max_events":5,"window":60000000000},"a":{"max_events":1,"window":"90s"}}}`: "1/90s, 5/1m",
		`{"rate_limits":{"z":{"max_events":2,"window":"1.5s"}}}`:                                          "2/1.5s",
		`not json`: "",
	} {
		if got := describeRateLimit(json.RawMessage(in)); got != want {
			t.Errorf("describeRateLimit(%s) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkExtractRoutes flattens a server with 100 discovered routes (the
// work of one page refresh after a config change).
func BenchmarkExtractRoutes(b *testing.B) {
	var routes []string
	for i := 0; i < 100; i++ {
		routes = append(routes, fmt.Sprintf(`{"@id":"docker:gw:s%d:api","match":[{"path":["/s%d","/s%d/*"]}],"handle":[
			{"handler":"audit"},{"handler":"jwt_auth","hmac_secrets":["x"]},{"handler":"rbac","require":[{"any":["admin"]}]},
			{"handler":"rate_limit","rate_limits":{"z%d":{"key":"k","max_events":100,"window":"1m0s"}}},
			{"handler":"reverse_proxy","upstreams":[{"dial":"127.0.0.1:%d"}]}],"terminal":true}`, i, i, i, i, 8000+i))
	}
	app := []byte(`{"servers":{"gw":{"listen":[":443"],"routes":[` + strings.Join(routes, ",") + `]}}}`)
	b.SetBytes(int64(len(app)))
	b.ReportAllocs()
	for b.Loop() {
		rs, err := ExtractRoutes(app)
		if err != nil || len(rs) != 100 {
			b.Fatal(len(rs), err)
		}
	}
}
