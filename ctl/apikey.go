package ctl

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/apigate/gateway/caddyapikey/apikeys"
	"github.com/apigate/gateway/internal/atomicfile"
)

const apikeyUsage = `usage:
  gatewayctl apikey new --sub SUBJECT [--roles a,b] [--scope "x y"] [--expires T] [--id ID] [--plan P] [--file keys.json]
	make an API key for the gateway's api_key handler. Prints the key
	(shown this once: the gateway keeps only its hash) and its keys file
	entry. With --file, the entry is added to that keys file (the file
	api_key's keys_file names): the file is created (mode 0600) if
	missing, else replaced atomically with its mode and owner kept, and the
	gateway reads it within check_interval; an id already in the file, or
	a file that does not load, is an error and leaves the file as it was.
	Without --file, add the printed line to the file's array yourself.
	--expires takes an RFC 3339 time (2027-01-31T00:00:00Z) or a duration
	from now (720h). --id names the key (letters, digits, '-', '.');
	default: random. --plan gives the key's consumer a quota plan (one of
	the quota global option's plans; default: the quota's default plan).
`

func cmdAPIKey(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("apikey needs new\n" + apikeyUsage)
	}
	switch {
	case args[0] == "new":
		return cmdAPIKeyNew(args[1:], out, time.Now())
	case isHelp(args[0]):
		return writeHelp(out, apikeyUsage)
	}
	return fmt.Errorf("unknown apikey command %q: want new (gatewayctl apikey -h for help)", args[0])
}

func cmdAPIKeyNew(args []string, out io.Writer, now time.Time) error {
	fs := flag.NewFlagSet("apikey new", flag.ContinueOnError)
	sub := fs.String("sub", "", "subject the key authenticates (required)")
	roles := fs.String("roles", "", "comma-separated roles")
	scope := fs.String("scope", "", "scopes, separated by spaces or commas")
	expires := fs.String("expires", "", "RFC 3339 time or duration from now")
	id := fs.String("id", "", "key id (default: random)")
	file := fs.String("file", "", "keys file to add the entry to (created if missing)")
	plan := fs.String("plan", "", "the key's quota plan (default: the quota's default plan)")
	if done, err := parseFlags(fs, args, apikeyUsage, out); done {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), apikeyUsage)
	}
	if *sub == "" {
		return errors.New("--sub is required\n" + apikeyUsage)
	}
	entry := apikeys.Entry{Sub: *sub, Roles: splitList(*roles), Scope: strings.Join(splitList(*scope), " "), Plan: *plan}
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
	if *file != "" {
		// the file is added to before the key is shown: a key is never
		// printed for an entry that did not make it into the file
		if err := addToKeysFile(*file, entry); err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "key (shown once; give it to the client): %s\nadded to %s:\n%s\n", key, *file, line)
		return err
	}
	_, err = fmt.Fprintf(out, "key (shown once; give it to the client): %s\nkeys file entry:\n%s\n", key, line)
	return err
}

// addToKeysFile appends entry to the keys file at path, creating it when
// it does not exist.
func addToKeysFile(path string, entry apikeys.Entry) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	next, err := apikeys.Append(data, entry)
	if err != nil {
		return fmt.Errorf("keys file %s: %w", path, err)
	}
	return atomicfile.Write(path, next, 0o600)
}

// splitList splits on commas and spaces, dropping empty parts.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}
