package caddydocker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "gateway-reload",
		Usage: "--config <path> [--adapter <name>] [--address <interface>] [--force]",
		Short: "Reloads the config and keeps the discovered container routes serving",
		Long: `
Like 'caddy reload', but for a gateway whose docker app discovers containers.

'caddy reload' loads a config without the routes the docker app patched into
the running one, and they are missing (404) until the app puts them back, one
more reload later (about 0.3 s under load). gateway-reload reads the running
discovered routes from the admin API and puts them into the new config before
loading it, so they serve throughout; the app then finds them in place and
does not reload again (or replaces them at once if the containers or the
docker options changed).

Without a docker app in the new config, or with none of its routes in the
running one, it is exactly 'caddy reload'.`,
		CobraFunc: func(cmd *cobra.Command) {
			cmd.Flags().StringP("config", "c", "", "Configuration file (required)")
			cmd.Flags().StringP("adapter", "a", "", "Name of config adapter to apply")
			cmd.Flags().StringP("address", "", "", "Address of the administration listener, if different from config")
			cmd.Flags().BoolP("force", "f", false, "Force config reload, even if it is the same")
			cmd.RunE = caddycmd.WrapCommandFuncForCobra(cmdGatewayReload)
		},
	})
}

func cmdGatewayReload(fl caddycmd.Flags) (int, error) {
	config, configFile, adapterUsed, err := caddycmd.LoadConfig(fl.String("config"), fl.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	if configFile == "" {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("no config file to load")
	}
	adminAddr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), config, configFile, fl.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("couldn't determine admin API address: %v", err)
	}
	live := func(server string) ([]json.RawMessage, error) {
		resp, err := caddycmd.AdminAPIRequest(adminAddr, http.MethodGet, "/config/apps/http/servers/"+url.PathEscape(server)+"/routes", nil, nil)
		if err != nil {
			// e.g. the running config has no such server yet; if the
			// admin API is unreachable, the load below says so
			fmt.Fprintf(os.Stderr, "no running routes of server %q to keep (%v); reloading as caddy reload does\n", server, err)
			return nil, nil
		}
		defer resp.Body.Close()
		var routes []json.RawMessage
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&routes); err != nil {
			return nil, fmt.Errorf("reading the running routes of server %q: %v", server, err)
		}
		return routes, nil
	}
	merged, server, n, err := CarryDiscoveredRoutes(config, live)
	if err != nil {
		return caddy.ExitCodeFailedStartup, err
	}
	headers := make(http.Header)
	if fl.Bool("force") {
		headers.Set("Cache-Control", "must-revalidate")
	}
	headers.Set("Caddy-Config-Source-File", configFile)
	headers.Set("Caddy-Config-Source-Adapter", adapterUsed)
	resp, err := caddycmd.AdminAPIRequest(adminAddr, http.MethodPost, "/load", headers, bytes.NewReader(merged))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("sending configuration to instance: %v", err)
	}
	resp.Body.Close()
	if server != "" {
		fmt.Fprintf(os.Stderr, "reloaded; kept %d discovered routes of server %q serving\n", n, server)
	}
	printFastPath(adminAddr)
	return caddy.ExitCodeSuccess, nil
}

// printFastPath prints, per server with the apigate listener wrapper,
// whether the fast path serves the config just loaded (docs/fastpath.md),
// from the admin API's overview (the dashboard's, in the gateway binary).
func printFastPath(adminAddr string) {
	resp, err := caddycmd.AdminAPIRequest(adminAddr, http.MethodGet, "/gateway/overview", nil, nil)
	if err != nil {
		return // (a binary without the dashboard's admin module)
	}
	defer resp.Body.Close()
	var o struct {
		FastPath []struct {
			Server string `json:"server"`
			On     bool   `json:"on"`
			Reason string `json:"reason"`
			Routes []struct {
				Route   string   `json:"route"`
				Plan    bool     `json:"plan"`
				Reason  string   `json:"reason"`
				AsCaddy []string `json:"as_caddy_calls_it"`
			} `json:"routes"`
		} `json:"fast_path"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&o) != nil {
		return
	}
	for _, s := range o.FastPath {
		if !s.On {
			fmt.Fprintf(os.Stderr, "fast path off for server %s: %s\n", s.Server, s.Reason)
			continue
		}
		on := 0
		for _, r := range s.Routes {
			if r.Plan {
				on++
			}
		}
		fmt.Fprintf(os.Stderr, "fast path on for server %s: %d of %d routes run on the plan\n", s.Server, on, len(s.Routes))
		for _, r := range s.Routes {
			switch {
			case !r.Plan:
				fmt.Fprintf(os.Stderr, "  route %s on Caddy's path: %s\n", r.Route, r.Reason)
			case len(r.AsCaddy) > 0:
				fmt.Fprintf(os.Stderr, "  route %s runs as Caddy calls them: %s\n", r.Route, strings.Join(r.AsCaddy, ", "))
			}
		}
	}
}

// CarryDiscoveredRoutes puts the discovered routes of the running config
// into config (Caddy JSON, as an operator's reload would load it): live
// returns the running routes of a server. The server is the docker app's
// `server`, or the config's only HTTP server. It returns config unchanged
// (server "") when config has no docker app, and with n = 0 when the
// running server has no discovered routes. The result is what the docker
// app's next apply would make of the running routes and the new config's
// own routes, so the app finds nothing to change.
func CarryDiscoveredRoutes(config []byte, live func(server string) ([]json.RawMessage, error)) (out []byte, server string, n int, err error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(config, &cfg); err != nil {
		return nil, "", 0, fmt.Errorf("config is not a JSON object: %v", err)
	}
	var apps map[string]json.RawMessage
	if raw, ok := cfg["apps"]; ok {
		if err := json.Unmarshal(raw, &apps); err != nil {
			return nil, "", 0, fmt.Errorf("config apps: %v", err)
		}
	}
	rawDocker, ok := apps["docker"]
	if !ok {
		return config, "", 0, nil
	}
	var docker struct {
		Server string `json:"server"`
	}
	if err := json.Unmarshal(rawDocker, &docker); err != nil {
		return nil, "", 0, fmt.Errorf("docker app: %v", err)
	}
	var httpApp map[string]json.RawMessage
	if err := json.Unmarshal(apps["http"], &httpApp); err != nil || httpApp == nil {
		return nil, "", 0, fmt.Errorf("docker app without an http app in the config")
	}
	var servers map[string]json.RawMessage
	if err := json.Unmarshal(httpApp["servers"], &servers); err != nil || servers == nil {
		return nil, "", 0, fmt.Errorf("http app without servers in the config")
	}
	server = docker.Server
	if server == "" {
		names := make([]string, 0, len(servers))
		for name := range servers {
			names = append(names, name)
		}
		if server, err = onlyServer(names); err != nil {
			return nil, "", 0, err
		}
	}
	var srv map[string]json.RawMessage
	if err := json.Unmarshal(servers[server], &srv); err != nil || srv == nil {
		return nil, "", 0, fmt.Errorf("docker app: server %q is not an HTTP server of the config", server)
	}
	running, err := live(server)
	if err != nil {
		return nil, "", 0, err
	}
	prefix, noRoute := RouteIDPrefix(server), NoRouteID(server)
	var discovered []json.RawMessage
	for _, r := range running {
		if id := RouteID(r); strings.HasPrefix(id, prefix) && id != noRoute {
			discovered = append(discovered, r)
		}
	}
	if len(discovered) == 0 {
		return config, server, 0, nil
	}
	var own []json.RawMessage
	if raw, ok := srv["routes"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &own); err != nil {
			return nil, "", 0, fmt.Errorf("routes of server %q: %v", server, err)
		}
	}
	if srv["routes"], err = json.Marshal(MergeRoutes(server, own, discovered)); err != nil {
		return nil, "", 0, err
	}
	if servers[server], err = json.Marshal(srv); err != nil {
		return nil, "", 0, err
	}
	if httpApp["servers"], err = json.Marshal(servers); err != nil {
		return nil, "", 0, err
	}
	if apps["http"], err = json.Marshal(httpApp); err != nil {
		return nil, "", 0, err
	}
	if cfg["apps"], err = json.Marshal(apps); err != nil {
		return nil, "", 0, err
	}
	out, err = json.Marshal(cfg)
	return out, server, len(discovered), err
}
