// Package caddysuite runs Caddy's own integration suite
// (github.com/caddyserver/caddy/v2/caddytest/integration, an oracle nobody
// here wrote) against the gateway with the apigate listener wrapper in
// every server of every config the suite loads (docs/fastpath.md).
//
// caddytest sends each config to the admin API at localhost:2999 and only
// starts a Caddy of its own when nothing answers there. The suite's test
// puts a small admin proxy on that address in front of the gateway (run in
// process, with its admin API elsewhere): a loaded config gets the wrapper
// (Inject), a config read back loses it again (Undo), so that the suite's
// own check of the running config still holds.
package caddysuite

import (
	"encoding/json"
	"fmt"
)

// Injection is what Inject changed in a config, for Undo.
type Injection struct {
	admin      any  // the config's own admin value (nil: none)
	hadAdmin   bool // the config had an admin object
	hadListen  bool
	logging    int             // 0: the config had logging.logs, 1: logging, 2: neither
	logs       map[string]bool // servers Inject gave access logs
	wrappers   map[string]int  // server -> index of the added wrapper
	noWrappers map[string]bool
	guarded    map[string]bool // servers AddPathGuard gave a first route (true: they had no routes)
}

// PathGuardRoute is the route AddPathGuard puts first in every server:
// path_guard (reject, its default) for every request.
const PathGuardRoute = `{"handle":[{"handler":"path_guard"}]}`

// AddPathGuard returns cfg (as Inject made it) with PathGuardRoute first
// in every HTTP server's routes, and records that for Undo: Caddy's suite
// run with the gateway's request path hardening in front of every config.
func (in *Injection) AddPathGuard(cfg []byte) ([]byte, error) {
	var c map[string]any
	if err := json.Unmarshal(cfg, &c); err != nil {
		return nil, fmt.Errorf("config is not a JSON object: %v", err)
	}
	var route any
	json.Unmarshal([]byte(PathGuardRoute), &route)
	in.guarded = map[string]bool{}
	if httpApp, ok := obj(c, "apps", "http"); ok {
		servers, _ := httpApp["servers"].(map[string]any)
		for name, s := range servers {
			srv, ok := s.(map[string]any)
			if !ok {
				continue
			}
			routes, had := srv["routes"].([]any)
			srv["routes"] = append([]any{route}, routes...)
			in.guarded[name] = !had
		}
	}
	return json.Marshal(c)
}

// CountLog is the name of the log Inject adds: every access log record of
// every server goes to it (its writer is the suite's counter).
const CountLog = "caddysuite_count"

// Inject returns cfg (JSON) with its admin API at adminAddr, access logs
// on in every HTTP server with every record also sent to a log named
// CountLog whose writer is the module countWriter (so that every request
// is counted, on either path), and,
// when wrap is set, the apigate listener wrapper in every HTTP server
// (after the tls placeholder when the server lists one: a wrapper must
// see the decrypted connection).
func Inject(cfg []byte, adminAddr string, wrap bool) ([]byte, *Injection, error) {
	var c map[string]any
	if err := json.Unmarshal(cfg, &c); err != nil {
		return nil, nil, fmt.Errorf("config is not a JSON object: %v", err)
	}
	if c == nil {
		c = map[string]any{}
	}
	in := &Injection{wrappers: map[string]int{}, noWrappers: map[string]bool{}, logs: map[string]bool{}}
	admin, ok := c["admin"].(map[string]any)
	in.hadAdmin = ok
	if !ok {
		admin = map[string]any{}
		c["admin"] = admin
	}
	in.admin, in.hadListen = admin["listen"]
	admin["listen"] = adminAddr

	logging, ok := c["logging"].(map[string]any)
	if !ok {
		logging = map[string]any{}
		c["logging"] = logging
		in.logging = 2
	}
	logs, ok := logging["logs"].(map[string]any)
	if !ok {
		logs = map[string]any{}
		logging["logs"] = logs
		in.logging = max(in.logging, 1)
	}
	logs[CountLog] = map[string]any{
		"writer":  map[string]any{"output": "caddysuite_count"},
		"encoder": map[string]any{"format": "json"},
		"level":   "DEBUG",
		"include": []any{"http.log.access"},
	}

	if httpApp, ok := obj(c, "apps", "http"); ok {
		servers, _ := httpApp["servers"].(map[string]any)
		for name, s := range servers {
			srv, ok := s.(map[string]any)
			if !ok {
				continue
			}
			if _, ok := srv["logs"]; !ok {
				srv["logs"] = map[string]any{}
				in.logs[name] = true
			}
			if !wrap {
				continue
			}
			list, had := srv["listener_wrappers"].([]any)
			at := 0
			for i, w := range list {
				if m, ok := w.(map[string]any); ok && m["wrapper"] == "tls" {
					at = i + 1
				}
			}
			list = append(list[:at:at], append([]any{map[string]any{"wrapper": "apigate"}}, list[at:]...)...)
			srv["listener_wrappers"] = list
			in.wrappers[name] = at
			in.noWrappers[name] = !had
		}
	}
	out, err := json.Marshal(c)
	return out, in, err
}

// Undo takes back from a running config (JSON, as the admin API's
// GET /config/ gives it) what Inject added.
func (in *Injection) Undo(running []byte) ([]byte, error) {
	var c map[string]any
	if err := json.Unmarshal(running, &c); err != nil || c == nil {
		return running, err
	}
	if admin, ok := c["admin"].(map[string]any); ok {
		if in.hadListen {
			admin["listen"] = in.admin
		} else {
			delete(admin, "listen")
		}
		if !in.hadAdmin && len(admin) == 0 {
			delete(c, "admin")
		}
	}
	if logging, ok := c["logging"].(map[string]any); ok {
		if logs, ok := logging["logs"].(map[string]any); ok {
			delete(logs, CountLog)
			if in.logging >= 1 && len(logs) == 0 {
				delete(logging, "logs")
			}
		}
		if in.logging == 2 && len(logging) == 0 {
			delete(c, "logging")
		}
	}
	if httpApp, ok := obj(c, "apps", "http"); ok {
		servers, _ := httpApp["servers"].(map[string]any)
		for name := range in.logs {
			if srv, ok := servers[name].(map[string]any); ok {
				delete(srv, "logs")
			}
		}
		for name, none := range in.guarded {
			srv, ok := servers[name].(map[string]any)
			if !ok {
				continue
			}
			if routes, _ := srv["routes"].([]any); len(routes) > 0 {
				if none && len(routes) == 1 {
					delete(srv, "routes")
				} else {
					srv["routes"] = routes[1:]
				}
			}
		}
		for name, at := range in.wrappers {
			srv, ok := servers[name].(map[string]any)
			if !ok {
				continue
			}
			list, _ := srv["listener_wrappers"].([]any)
			if at < len(list) {
				list = append(list[:at:at], list[at+1:]...)
			}
			if len(list) == 0 && in.noWrappers[name] {
				delete(srv, "listener_wrappers")
			} else {
				srv["listener_wrappers"] = list
			}
		}
	}
	return json.Marshal(c)
}

// obj follows keys through nested JSON objects.
func obj(c map[string]any, keys ...string) (map[string]any, bool) {
	cur := c
	for _, k := range keys {
		next, ok := cur[k].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}
