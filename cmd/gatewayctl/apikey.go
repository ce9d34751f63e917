package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/apigate/gateway/caddyapikey/apikeys"
)

const apikeyUsage = `usage:
  gatewayctl apikey new --sub SUBJECT [--roles a,b] [--scope "x y"] [--expires T] [--id ID]
	make an API key for the gateway's api_key handler. Prints the key
	(shown this once: the gateway keeps only its hash) and the JSON line
	to add to the keys file's array. --expires takes an RFC 3339 time
	(2027-01-31T00:00:00Z) or a duration from now (720h). --id names the
	key (letters, digits, '-', '.'); default: random.
`

func cmdAPIKey(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("apikey needs new\n" + apikeyUsage)
	}
	switch args[0] {
	case "new":
		return cmdAPIKeyNew(args[1:], out, time.Now())
	case "help", "-h", "-help", "--help":
		_, err := io.WriteString(out, apikeyUsage)
		return err
	}
	return fmt.Errorf("unknown apikey command %q: want new", args[0])
}

func cmdAPIKeyNew(args []string, out io.Writer, now time.Time) error {
	fs := flag.NewFlagSet("apikey new", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), apikeyUsage) }
	sub := fs.String("sub", "", "subject the key authenticates (required)")
	roles := fs.String("roles", "", "comma-separated roles")
	scope := fs.String("scope", "", "scopes, separated by spaces or commas")
	expires := fs.String("expires", "", "RFC 3339 time or duration from now")
	id := fs.String("id", "", "key id (default: random)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), apikeyUsage)
	}
	if *sub == "" {
		return errors.New("--sub is required\n" + apikeyUsage)
	}
	entry := apikeys.Entry{Sub: *sub, Roles: splitList(*roles), Scope: strings.Join(splitList(*scope), " ")}
	if *expires != "" {
		if t, err := time.Parse(time.RFC3339, *expires); err == nil {
			entry.Expires = t.UTC().Format(time.RFC3339)
		} else if d, err := time.ParseDuration(*expires); err == nil && d > 0 {
			entry.Expires = now.Add(d).UTC().Format(time.RFC3339)
		} else {
			return fmt.Errorf("invalid --expires %q: want an RFC 3339 time (2027-01-31T00:00:00Z) or a positive duration (720h)", *expires)
		}
	}
	key, hash, err := apikeys.New(*id)
	if err != nil {
		return err
	}
	entry.Hash = hash
	entry.ID, _ = apikeys.SplitKey(key)
	line, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	// the entry must load as the gateway loads it
	if _, err := apikeys.Parse([]byte("[" + string(line) + "]")); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "key (shown once; give it to the client): %s\nkeys file entry:\n%s\n", key, line)
	return err
}

// splitList splits on commas and spaces, dropping empty parts.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}
