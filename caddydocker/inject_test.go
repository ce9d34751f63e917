package caddydocker

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestLabelInjection: label values with quotes, braces, placeholders or JSON
// fragments never reach the generated config as anything but rejected
// labels: the container is skipped with a reason, and no value containing a
// placeholder or a JSON fragment appears in any route.
func TestLabelInjection(t *testing.T) {
	hostile := []string{
		`{env.SECRET}`,
		`/api/{env.SECRET}`,
		`{http.request.header.Authorization}`,
		`/api"},{"handler":"static_response","body":"pwned`,
		`admin","x":"y`,
		`/api' OR '1'='1`,
		`{file./etc/shadow}`,
		"/api\n/admin",
		`/api\u0022`,
		`100/1m"}`,
	}
	keys := []string{"gateway.name", "gateway.port", "gateway.address",
		"gateway.router.api.path_prefix", "gateway.router.api.host", "gateway.router.api.methods",
		"gateway.router.api.auth.roles", "gateway.router.api.rate_limit", "gateway.router.api.strip_prefix"}
	for _, key := range keys {
		for _, val := range hostile {
			t.Run(key+"="+val, func(t *testing.T) {
				labels := map[string]string{}
				for i, kv := 0, base("gateway.router.api.auth.required", "true"); i+1 < len(kv); i += 2 {
					labels[kv[i]] = kv[i+1]
				}
				labels[key] = val
				ds := Discover([]Container{{ID: "id-x", Name: "x", Labels: labels, IP: "10.88.0.2"}}, fullLabels)
				plan, err := BuildRoutes(ds, testOpts)
				if err != nil {
					t.Fatalf("BuildRoutes: %v", err)
				}
				out, _ := json.Marshal(plan)
				s := string(out)
				for _, bad := range []string{"env.SECRET", "pwned", "Authorization}", "/etc/shadow", `"x":"y"`, "OR '1'"} {
					if strings.Contains(s, bad) && !rejected(ds) {
						t.Errorf("%s=%q reached the generated routes: %s", key, val, s)
					}
				}
				if !rejected(ds) && strings.ContainsAny(val, "{}\"'\n") {
					t.Errorf("%s=%q was accepted", key, val)
				}
			})
		}
	}
}

func rejected(ds []Discovered) bool {
	for _, d := range ds {
		if len(d.Errors) > 0 {
			return true
		}
	}
	return false
}
