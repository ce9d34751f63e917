package caddydocker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	_ "github.com/apigate/gateway/natsstore" // the storage of labels' limits shared by a fleet
)

// TestGeneratedRoutesLoad checks that Caddy, with the real jwt_auth, rbac,
// rate_limit, permission and audit modules, accepts every route the labels
// can generate (caddy.Validate provisions the whole config without
// starting it).
func TestGeneratedRoutesLoad(t *testing.T) {
	var app App
	d := caddyfile.NewTestDispenser(`docker {
		jwt_auth {
			hmac_secret 0123456789abcdef0123456789abcdef
		}
		rbac {
			roles_claim realm_access.roles
		}
		permission {
			url http://127.0.0.1:9/check
		}
	}`)
	if err := app.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	opts := BuildOptions{Server: "gateway"}
	var err error
	if opts.JWTAuth, err = withHandler(app.JWTAuth, "jwt_auth"); err != nil {
		t.Fatal(err)
	}
	if opts.Permission, err = withHandler(app.Permission, "permission"); err != nil {
		t.Fatal(err)
	}
	rb, _ := withHandler(app.RBAC, "rbac")
	opts.RBAC = rbacBuilder(rb)

	var all []Container
	for _, tc := range routeCases {
		all = append(all, tc.containers...)
	}
	// one container per case name, so that conflicts do not hide routes
	for i := range all {
		all[i].Name = all[i].Name + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		all[i].ID = "id-" + all[i].Name
		all[i].Labels = copyLabels(all[i].Labels)
		all[i].Labels["gateway.name"] = all[i].Name
		for k, v := range all[i].Labels {
			if strings.HasSuffix(k, ".path_prefix") && strings.HasPrefix(v, "/") {
				all[i].Labels[k] = "/" + all[i].Name + v
			}
		}
	}
	for _, shared := range []struct {
		name   string
		counts json.RawMessage
	}{
		{name: "counted per gateway"},
		// a fleet: the labels' limits count through a bucket of the
		// fleet's NATS (none runs here: nothing connects at
		// provisioning, and validate writes nothing)
		{name: "shared through the fleet's NATS",
			counts: json.RawMessage(`{"fleet":{"nats":["nats://127.0.0.1:1"],"bucket":"gateway_routes_rate_limit","sync_interval":"250ms"}}`)},
	} {
		t.Run(shared.name, func(t *testing.T) {
			opts := opts
			opts.RateLimitCounts = shared.counts
			validateRoutes(t, all, opts)
		})
	}
}

// validateRoutes builds the routes of cs and has Caddy validate them.
func validateRoutes(t *testing.T, all []Container, opts BuildOptions) {
	t.Helper()
	plan, err := BuildRoutes(Discover(all, fullLabels), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Routes) < 20 {
		t.Fatalf("only %d routes", len(plan.Routes))
	}
	routes := plan.Routes
	cfg := map[string]any{
		"admin": map[string]any{"disabled": true},
		"apps": map[string]any{
			"audit": map[string]any{},
			"http": map[string]any{"servers": map[string]any{
				"gateway": map[string]any{"listen": []string{"127.0.0.1:19598"}, "routes": routes},
			}},
		},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var c caddy.Config
	if err := json.Unmarshal(caddy.RemoveMetaFields(raw), &c); err != nil {
		t.Fatal(err)
	}
	if err := caddy.Validate(&c); err != nil {
		t.Fatalf("Caddy rejects the generated routes: %v", err)
	}
}

func copyLabels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}
