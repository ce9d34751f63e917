package caddydocker

import (
	"bytes"
	"fmt"
	"net/http"
	"os"

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
the gateway.

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
	return caddy.ExitCodeSuccess, nil
}
