// Package ctl holds the gateway's operator and developer commands, in one
// table served two ways: as `caddy gateway <command>` in the gateway binary
// (the root package registers it with Caddy's command line) and as
// `gatewayctl <command>` (cmd/gatewayctl, a small binary without Caddy).
// A command added to the table is there under both names.
//
// Errors, and an audit trail that does not verify, exit with status 2;
// -h, --help and help print usage to stdout and exit 0.
package ctl

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Command is one command of the table.
type Command struct {
	// Name is the word after `caddy gateway` (or `gatewayctl`).
	Name string
	// Short is one line for Caddy's list of commands (`caddy help
	// gateway`), without punctuation at the end.
	Short string
	// Synopsis is the command's lines in the usage listing: each form,
	// indented by two spaces, and what it does.
	Synopsis string
	// Help is the command's own usage (`<command> -h`).
	Help string
	// Run runs the command with the arguments after its name.
	Run func(args []string, out io.Writer) error
}

// Commands is the table, in the order the usage lists it.
func Commands() []Command { return commands }

var commands = []Command{
	{
		Name: "apikey", Short: "Make an API key for the api_key handler (and add it to a keys file)",
		Synopsis: "  apikey new --sub S [...]          make an API key: print it once, and its keys file entry\n" +
			"                                    (--file keys.json adds the entry to the file)\n",
		Help: apikeyUsage, Run: cmdAPIKey,
	},
	{
		Name: "usage", Short: "Show what consumers used of their quota plans (admin API)",
		Synopsis: "  usage [--admin A] [--consumer K]  what consumers used of their quota plans (admin API)\n",
		Help:     usageUsage, Run: cmdUsage,
	},
	{
		Name: "audit", Short: "Create the audit chain's signing key; verify audit trails; read the audit stream",
		Synopsis: "  audit keygen -out D               create the Ed25519 key pair that signs audit checkpoints\n" +
			"  audit verify -key K FILE...       verify audit trails against the public key K\n" +
			"  audit tail --nats URL [--since D] print the audit events of the JetStream stream (--follow: and new ones)\n" +
			"  audit count --nats URL [--since D] [--client-request-id ID]\n" +
			"                                    count the stream's events, per node and decision\n",
		Help: auditUsage, Run: cmdAudit,
	},
	{
		Name: "fleet", Short: "Create the fleet's audit stream and buckets on NATS",
		Synopsis: "  fleet init --nats URL [--replicas N]\n" +
			"                                    create the fleet's audit stream and buckets on NATS\n",
		Help: fleetUsage, Run: cmdFleet,
	},
	{
		Name: "secret", Short: "Print (or create once in a file) a random HMAC secret",
		Synopsis: "  secret [-file F]                  print (or create once in F) a random HMAC secret\n",
		Help:     secretUsage, Run: cmdSecret,
	},
	{
		Name: "token", Short: "Sign a JWT for testing the gateway (HS256 or RS256)",
		Synopsis: "  token [flags]                     sign a JWT for testing the gateway (HS256 or RS256)\n",
		Help:     tokenUsage, Run: cmdToken,
	},
	{
		Name: "keygen", Short: "Create an RSA key pair and a JWKS for test tokens",
		Synopsis: "  keygen -dir D                     create an RSA key pair and a JWKS for it in D\n",
		Help:     keygenUsage, Run: cmdKeygen,
	},
}

// Usage is the listing of every command, as `<name> -h` prints it (name:
// "gatewayctl" or "caddy gateway").
func Usage(name string) string {
	var b strings.Builder
	b.WriteString("usage: gatewayctl <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		b.WriteString(c.Synopsis)
	}
	b.WriteString(`  help [<command>]                  this text, or a command's usage

gatewayctl <command> -h prints a command's flags. Flags take one dash or two
(-key or --key). Exit status: 0 on success, 2 on an error or an audit trail
that does not verify.
`)
	if name == "gatewayctl" {
		b.WriteString("The gateway binary has the same commands: caddy gateway <command>.\n")
	} else {
		b.WriteString("The same commands without the gateway: gatewayctl, from cmd/gatewayctl.\n")
	}
	return Rename(b.String(), name)
}

// prog is the name the commands were called by, in their help texts and
// errors: "gatewayctl" or "caddy gateway" (Main sets it).
var prog = "gatewayctl"

// Rename returns a help text or an error message of the commands with
// name ("caddy gateway") where the text says "gatewayctl".
func Rename(s, name string) string {
	if name == "gatewayctl" {
		return s
	}
	return strings.ReplaceAll(s, "gatewayctl ", name+" ")
}

// named is Rename with the name the commands were called by.
func named(s string) string { return Rename(s, prog) }

// writeHelp writes a help text to out, with the commands' name.
func writeHelp(out io.Writer, text string) error {
	_, err := io.WriteString(out, named(text))
	return err
}

// Main runs the command in args as the program called name ("gatewayctl",
// "caddy gateway"): its output goes to stdout, an error to stderr. It
// returns the exit status: 0, or 2 on an error.
func Main(name string, args []string, stdout, stderr io.Writer) int {
	prog = name
	if err := run(args, stdout); err != nil {
		fmt.Fprintln(stderr, name+":", named(err.Error()))
		return 2
	}
	return 0
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("no command\n" + Usage(prog))
	}
	if isHelp(args[0]) {
		if len(args) > 1 && args[0] == "help" {
			// help <command> [<subcommand>]: that command's usage
			return run(append(args[1:], "-h"), out)
		}
		return writeHelp(out, Usage(prog))
	}
	for _, c := range commands {
		if c.Name == args[0] {
			return c.Run(args[1:], out)
		}
	}
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.Name
	}
	return fmt.Errorf("unknown command %q: want %s (gatewayctl -h for help)", args[0], strings.Join(names, ", "))
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// parseFlags parses args with fs. -h (or --help) prints usage and fs's
// flags to out and returns done; a bad flag is an error that says where
// help is. Nothing goes to stderr from here: Main prints the error.
func parseFlags(fs *flag.FlagSet, args []string, usage string, out io.Writer) (done bool, err error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return true, printUsage(fs, usage, out)
	}
	if err != nil {
		return true, fmt.Errorf("%s: %v (gatewayctl %s -h for help)", fs.Name(), err, fs.Name())
	}
	return false, nil
}

// printUsage writes usage and fs's flags with their defaults to out.
func printUsage(fs *flag.FlagSet, usage string, out io.Writer) error {
	if err := writeHelp(out, usage); err != nil {
		return err
	}
	if _, err := io.WriteString(out, "\nflags:\n"); err != nil {
		return err
	}
	fs.SetOutput(out)
	fs.PrintDefaults()
	return nil
}
