package ctl

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/apigate/gateway/caddyaudit/auditchain"
)

const auditUsage = `usage:
  gatewayctl audit keygen -out DIR
	create the key pair that signs audit checkpoints: DIR/audit.key
	(Ed25519 private key, PKCS #8 PEM, mode 0600; for the gateway's
	audit { chain DIR/audit.key }) and DIR/audit.pub (PKIX PEM; for
	verifying). Prints the key id. An existing audit.key is kept, not
	overwritten.
  gatewayctl audit verify -key KEY.pem [-any-order] [-allow-unchained] [-require-final] FILE...
	verify audit trails: JSON lines as a file sink writes them (a line
	may also hold a JSON array of events, an HTTP sink's batch body).
	The files are one trail, read in the order given (rotated files
	oldest first); "-" reads stdin. KEY.pem is audit.pub (or audit.key).
	Prints a summary of each chain. Flags (also --flag) may come before
	or after the files:
	  -any-order        events of a chain may come in any order (only
	                    missing and altered events are errors)
	  -allow-unchained  accept events without chain, seq and hash
	  -require-final    a chain must end with a final checkpoint (the
	                    gateway stopped cleanly; nothing cut at the end)
Exit status: 0 when the trail verifies; 2 when it does not (the first
problem, with its file, line, chain and seq, is printed to stderr) or on
a usage error.
`

// stdin is what a file named "-" reads; tests replace it.
var stdin io.Reader = os.Stdin

func cmdAudit(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("audit needs keygen, verify, tail or count\n" + auditUsage + auditReadUsage)
	}
	switch args[0] {
	case "keygen":
		return cmdAuditKeygen(args[1:], out)
	case "verify":
		return cmdAuditVerify(args[1:], out)
	case "tail":
		return cmdAuditTail(args[1:], out)
	case "count":
		return cmdAuditCount(args[1:], out)
	}
	if isHelp(args[0]) {
		return writeHelp(out, auditUsage+auditReadUsage)
	}
	return fmt.Errorf("unknown audit command %q: want keygen, verify, tail or count (gatewayctl audit -h for help)", args[0])
}

// cmdAuditKeygen creates DIR/audit.key and DIR/audit.pub, keeping an
// existing audit.key.
func cmdAuditKeygen(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("audit keygen", flag.ContinueOnError)
	dir := fs.String("out", "", "directory for audit.key and audit.pub")
	if done, err := parseFlags(fs, args, auditUsage, out); done {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return errors.New("usage: gatewayctl audit keygen -out DIR")
	}
	keyPath := filepath.Join(*dir, "audit.key")
	pubPath := filepath.Join(*dir, "audit.pub")
	if _, err := os.Stat(keyPath); err == nil {
		pub, err := auditchain.LoadPublicKey(keyPath)
		if err != nil {
			return fmt.Errorf("%s exists (not overwritten) but: %w", keyPath, err)
		}
		_, err = fmt.Fprintf(out, "%s exists: kept, not overwritten\nkey id %s\n", keyPath, auditchain.KeyID(pub))
		return err
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	privPEM, pubPEM, err := auditchain.MarshalKeys(priv)
	if err != nil {
		return err
	}
	// O_EXCL: never replace a key that appeared since the Stat.
	f, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(privPEM); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(pubPath, pubPEM, 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n%s\nkey id %s\n", keyPath, pubPath, auditchain.KeyID(pub))
	return err
}

func cmdAuditVerify(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	keyFile := fs.String("key", "", "public key PEM (audit.pub), or the private key PEM")
	var opt auditchain.VerifyOptions
	fs.BoolVar(&opt.AnyOrder, "any-order", false, "accept a chain's events in any order")
	fs.BoolVar(&opt.AllowUnchained, "allow-unchained", false, "accept events without chain, seq and hash")
	fs.BoolVar(&opt.RequireFinal, "require-final", false, "require each chain to end with a final checkpoint")
	// Flags may come before and after the files; after "--", all are files.
	var files []string
	for {
		if done, err := parseFlags(fs, args, auditUsage, out); done {
			return err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			files = append(files, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		files = append(files, rest[0])
		args = rest[1:]
	}
	if *keyFile == "" || len(files) == 0 {
		return errors.New("usage: gatewayctl audit verify -key KEY.pem [-any-order] [-allow-unchained] [-require-final] FILE... (gatewayctl audit help)")
	}
	pub, err := auditchain.LoadPublicKey(*keyFile)
	if err != nil {
		return err
	}
	parts := make([]auditchain.Part, 0, len(files))
	for _, name := range files {
		if name == "-" {
			parts = append(parts, auditchain.Part{Name: "stdin", R: stdin})
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		parts = append(parts, auditchain.Part{Name: name, R: f})
	}
	rep, err := auditchain.VerifyParts(parts, pub, opt)
	if err != nil {
		return err
	}
	return printReport(out, rep, auditchain.KeyID(pub))
}

func printReport(out io.Writer, rep *auditchain.Report, keyID string) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHAIN\tNODE\tEVENTS\tSEQ\tCHECKPOINTS\tSIGNED THROUGH\tFINAL\tUNSIGNED")
	unsigned := 0
	for _, c := range rep.Chains {
		signed := "-"
		if c.SignedThrough >= 0 {
			signed = fmt.Sprint(c.SignedThrough)
		}
		final := "no"
		if c.Final {
			final = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t0-%d\t%d\t%s\t%s\t%d\n",
			c.ID, c.Node, c.Events, c.LastSeq, c.Checkpoints, signed, final, c.Unsigned)
		unsigned += c.Unsigned
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "ok: %s verified with key %s; duplicates skipped: %d, unchained events: %d\n",
		plural(len(rep.Chains), "chain"), keyID, rep.Duplicates, rep.Unchained)
	if err == nil && unsigned > 0 {
		_, err = fmt.Fprintf(out, "note: not signed yet: %s after the last checkpoint of its chain"+
			" (events at the end of a chain could have been removed or added)\n", plural(unsigned, "event"))
	}
	return err
}

// plural returns "1 event", "2 events".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
