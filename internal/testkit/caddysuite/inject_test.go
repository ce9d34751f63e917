package caddysuite

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestInjectUndo: Undo gives back the config as it was before Inject and
// AddPathGuard, for configs with and without admin, logging, listener
// wrappers and routes; Inject puts the wrapper after the tls placeholder,
// AddPathGuard its route first.
func TestInjectUndo(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		wrappers  string // the first server's listener_wrappers after Inject
	}{
		{"bare", `{}`, ""},
		{"server", `{"admin":{"listen":"localhost:2999"},"apps":{"http":{"servers":{"srv0":{"listen":[":9080"]}}}}}`, `[{"wrapper":"apigate"}]`},
		{"routes", `{"apps":{"http":{"servers":{"srv0":{"routes":[{"handle":[{"handler":"static_response"}]}]}}}}}`, `[{"wrapper":"apigate"}]`},
		{"tls placeholder", `{"apps":{"http":{"servers":{"srv0":{"listener_wrappers":[{"wrapper":"proxy_protocol"},{"wrapper":"tls"}]}}}}}`,
			`[{"wrapper":"proxy_protocol"},{"wrapper":"tls"},{"wrapper":"apigate"}]`},
		{"own logs", `{"logging":{"logs":{"default":{"level":"ERROR"}}},"admin":{"config":{"persist":false}},"apps":{"http":{"servers":{"srv0":{"logs":{"default_logger_name":"x"}}}}}}`, `[{"wrapper":"apigate"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, in, err := Inject([]byte(tc.cfg), "127.0.0.1:1", true)
			if err != nil {
				t.Fatal(err)
			}
			if out, err = in.AddPathGuard(out); err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			json.Unmarshal(out, &got)
			if got["admin"].(map[string]any)["listen"] != "127.0.0.1:1" {
				t.Errorf("admin not moved: %s", out)
			}
			if _, ok := got["logging"].(map[string]any)["logs"].(map[string]any)[CountLog]; !ok {
				t.Errorf("no count log: %s", out)
			}
			if tc.wrappers != "" {
				srv := got["apps"].(map[string]any)["http"].(map[string]any)["servers"].(map[string]any)["srv0"].(map[string]any)
				w, _ := json.Marshal(srv["listener_wrappers"])
				if string(w) != tc.wrappers {
					t.Errorf("listener_wrappers %s, want %s", w, tc.wrappers)
				}
				r, _ := json.Marshal(srv["routes"].([]any)[0])
				if string(r) != PathGuardRoute {
					t.Errorf("first route %s, want %s", r, PathGuardRoute)
				}
			}
			back, err := in.Undo(out)
			if err != nil {
				t.Fatal(err)
			}
			var orig, undone any
			json.Unmarshal([]byte(tc.cfg), &orig)
			json.Unmarshal(back, &undone)
			if !reflect.DeepEqual(orig, undone) {
				t.Errorf("Undo gave\n%s\nwant\n%s", back, tc.cfg)
			}
		})
	}
}
