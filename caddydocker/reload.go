package caddydocker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
		Short: "Reloads the config (the same as 'caddy reload'; kept for scripts)",
		Long: `
The same as 'caddy reload', kept for scripts written for earlier versions of
the gateway, and it prints, per server with the apigate listener wrapper,
whether the fast path serves the config it loaded.

Discovered container routes are not part of the config: the docker_routes
handlers load the docker app's current route set at every config load. So
'caddy reload' (or POST /load) keeps them serving throughout, and this
command does nothing more.`,
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
	headers := make(http.Header)
	if fl.Bool("force") {
		headers.Set("Cache-Control", "must-revalidate")
	}
	headers.Set("Caddy-Config-Source-File", configFile)
	headers.Set("Caddy-Config-Source-Adapter", adapterUsed)
	resp, err := caddycmd.AdminAPIRequest(adminAddr, http.MethodPost, "/load", headers, bytes.NewReader(config))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("sending configuration to instance: %v", err)
	}
	resp.Body.Close()
	fmt.Fprintln(os.Stderr, "reloaded (gateway-reload is now the same as caddy reload: discovered routes stay through any reload)")
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
