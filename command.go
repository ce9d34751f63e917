package gateway

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/apigate/gateway/ctl"
)

// The operator commands (package ctl) as `caddy gateway <command>`,
// registered as Caddy plugins register theirs (caddy-docker-proxy's
// `caddy docker-proxy`). Each command of ctl's table is a subcommand, so
// `caddy help gateway` lists them and `caddy help gateway <command>`
// prints its usage; the flags are the commands' own (Cobra parses none).
func init() {
	const name = "caddy gateway"
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "gateway",
		Usage: "<command> [flags]",
		Short: "The gateway's commands: API keys, quota usage, audit trails, fleet setup",
		Long:  ctl.Usage(name),
		CobraFunc: func(cmd *cobra.Command) {
			cmd.DisableFlagParsing = true
			cmd.SilenceErrors = true
			cmd.RunE = runCtl(name, nil)
			for _, c := range ctl.Commands() {
				cmd.AddCommand(&cobra.Command{
					Use:                c.Name,
					Short:              c.Short,
					Long:               ctl.Rename(c.Help, name),
					DisableFlagParsing: true,
					SilenceErrors:      true,
					RunE:               runCtl(name, []string{c.Name}),
				})
			}
		},
	})
}

// runCtl runs `caddy gateway <prefix> <args>` through ctl.Main, which
// prints the output and any error itself. Its exit status (2 on an error)
// reaches caddycmd.Main through the error WrapCommandFuncForCobra makes
// of it, the one way a command gives Caddy an exit status.
func runCtl(name string, prefix []string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		code := ctl.Main(name, append(prefix[:len(prefix):len(prefix)], args...), cmd.OutOrStdout(), cmd.ErrOrStderr())
		status := func(caddycmd.Flags) (int, error) { return code, nil }
		return caddycmd.WrapCommandFuncForCobra(status)(cmd, args)
	}
}
