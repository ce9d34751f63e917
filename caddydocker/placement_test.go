package caddydocker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
)

const placementGlobal = `{
	admin localhost:2905
	servers :19504 {
		name gateway
	}
	docker {
		host unix:///nonexistent/docker.sock
		server gateway
	}
}
`

// adaptRoutes adapts a Caddyfile and returns the routes of server gateway
// and the adapter's warnings.
func adaptRoutes(t *testing.T, caddyfile string) ([]json.RawMessage, []string) {
	t.Helper()
	out, warns, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Routes []json.RawMessage `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	var ws []string
	for _, w := range warns {
		if w.Directive == "docker_routes" {
			ws = append(ws, w.Message)
		}
	}
	return cfg.Apps.HTTP.Servers["gateway"].Routes, ws
}

// TestPlacement: where a Caddyfile's discovered routes run, and the
// warnings `caddy validate` (the adapter) prints when site policies do
// not cover them.
func TestPlacement(t *testing.T) {
	tests := []struct {
		name, site string
		front      bool     // the default placement: in front of the server's routes
		warn       []string // each warning must contain these, in order; nil: none
	}{
		{"the issue's site, without docker_routes: every policy named", `
	@blocked not remote_ip 10.0.0.0/8
	respond @blocked 403
	request_body {
		max_size 10MB
	}
	encode gzip
	respond /health 200`, true,
			[]string{"discovered routes run in front of the site for every host", "request_body", "encode", "respond @matcher", "put `docker_routes` in the site"}},
		{"without docker_routes and without policies", `
	handle /health {
		respond 200
	}`, true, nil},
		{"docker_routes in the site, a respond @matcher beside it", `
	@blocked not remote_ip 10.0.0.0/8
	respond @blocked 403
	encode gzip
	docker_routes`, false,
			[]string{"respond @matcher runs after docker_routes"}},
		{"docker_routes in the catch-all handle, the allowlist a handle block", `
	encode gzip
	@blocked not remote_ip 10.0.0.0/8
	handle @blocked {
		respond 403
	}
	handle {
		docker_routes
		respond "public"
	}`, false, nil},
		{"a route block in written order", `
	route {
		@blocked not remote_ip 10.0.0.0/8
		respond @blocked 403
		request_body {
			max_size 10MB
		}
		docker_routes
	}`, false, nil},
		{"a route block with the policy after docker_routes", `
	route {
		docker_routes
		@blocked not remote_ip 10.0.0.0/8
		abort @blocked
	}`, false, []string{"abort @matcher runs after docker_routes"}},
	}
	hosts := []struct {
		name, sites string
		front       bool
		warn        []string
	}{
		{"two host sites, default placement: the one with policies named", `
http://api.example.com:19504 {
	encode gzip
	handle /x {
		respond 200
	}
}
http://www.example.com:19504 {
	respond 200
}`, true, []string{"discovered routes run in front of site api.example.com", "encode"}},
		{"a host site with docker_routes and an abort beside it", `
http://api.example.com:19504 {
	@blocked not remote_ip 10.0.0.0/8
	abort @blocked
	docker_routes
}
http://www.example.com:19504 {
	respond 200
}`, false, []string{"site api.example.com: abort @matcher runs after docker_routes"}},
	}
	for _, h := range hosts {
		tests = append(tests, struct {
			name, site string
			front      bool
			warn       []string
		}{h.name, "\x00" + h.sites, h.front, h.warn})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sites := ":19504 {" + tc.site + "\n}\n"
			if strings.HasPrefix(tc.site, "\x00") {
				sites = tc.site[1:] + "\n"
			}
			routes, warns := adaptRoutes(t, placementGlobal+"\n"+sites)
			if len(routes) < 2 || !isCatchAll(routes[len(routes)-1]) {
				t.Fatalf("the server does not end with the catch-all: %s", routes)
			}
			if front := SameRoutes(routes[:1], []json.RawMessage{RoutesHandlerRoute}); front != tc.front {
				t.Errorf("docker_routes in front of the server's routes: %v, want %v", front, tc.front)
			}
			if !HasRoutesHandler(routes) {
				t.Errorf("no docker_routes handler: %s", routes)
			}
			if tc.warn == nil {
				if len(warns) != 0 {
					t.Errorf("warnings %q, want none", warns)
				}
				return
			}
			if len(warns) != 1 {
				t.Fatalf("warnings %q, want one", warns)
			}
			rest := warns[0]
			for _, part := range tc.warn {
				i := strings.Index(rest, part)
				if i < 0 {
					t.Fatalf("warning %q lacks %q (in order)", warns[0], part)
				}
				rest = rest[i+len(part):]
			}
		})
	}
}

// TestRoutesHandlerErrors: docker_routes where it cannot work fails the
// config load with a reason.
func TestRoutesHandlerErrors(t *testing.T) {
	tests := []struct{ name, caddyfile, want string }{
		{"no docker app", "{\n\tadmin off\n}\n:19505 {\n\tdocker_routes\n}\n",
			"docker_routes: this config has no docker app"},
		{"another server", placementGlobal + "\n:19504 {\n\trespond ok\n}\n:19505 {\n\tdocker_routes\n}\n",
			`docker_routes: it is in the routes of server "srv1", but the docker app routes to server "gateway"`},
		{"an argument", placementGlobal + "\n:19504 {\n\tdocker_routes /x extra\n}\n",
			"docker_routes takes no arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(tc.caddyfile), nil)
			if err == nil {
				var cfg caddy.Config
				if err = json.Unmarshal(out, &cfg); err != nil {
					t.Fatal(err)
				}
				err = caddy.Validate(&cfg)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
