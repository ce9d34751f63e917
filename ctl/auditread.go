package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apigate/gateway/internal/natsauth"
)

// natsFlags are the flags that connect a command to NATS: the settings
// of the gateway's NATS connection block (internal/natsauth builds the
// options of both).
type natsFlags struct {
	servers *string
	auth    natsauth.Settings
}

func addNATSFlags(fs *flag.FlagSet, serversHelp string) *natsFlags {
	f := &natsFlags{servers: fs.String("nats", "", serversHelp)}
	fs.StringVar(&f.auth.CredsFile, "creds", "", "NATS .creds file")
	fs.StringVar(&f.auth.NKeyFile, "nkey", "", "file holding an NKey user seed")
	fs.StringVar(&f.auth.User, "user", "", "NATS user")
	fs.StringVar(&f.auth.Password, "password", "", "NATS password")
	fs.StringVar(&f.auth.Token, "token", "", "NATS token")
	fs.BoolVar(&f.auth.TLS, "tls", false, "use TLS on nats:// URLs too (the --tls-* flags imply it)")
	fs.StringVar(&f.auth.TLSCA, "tls-ca", "", "PEM CAs that verify the NATS servers")
	fs.StringVar(&f.auth.TLSCert, "tls-cert", "", "PEM client certificate, for servers that require one (with --tls-key)")
	fs.StringVar(&f.auth.TLSKey, "tls-key", "", "the client certificate's PEM key")
	fs.StringVar(&f.auth.TLSServerName, "tls-server-name", "", "the name the servers' certificates are verified against (default: the URL's host)")
	return f
}

// connect connects to the servers the flags name (cmd names the command
// in errors).
func (f *natsFlags) connect(cmd string, timeout time.Duration) (*nats.Conn, error) {
	if strings.TrimSpace(*f.servers) == "" {
		return nil, fmt.Errorf("%s: --nats is required (the NATS servers' URLs)", cmd)
	}
	if (f.auth.TLSCert == "") != (f.auth.TLSKey == "") {
		return nil, fmt.Errorf("%s: --tls-cert %q and --tls-key %q: give both or neither", cmd, f.auth.TLSCert, f.auth.TLSKey)
	}
	auth, err := f.auth.Options()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	opts := append([]nats.Option{nats.Name("gatewayctl"), nats.Timeout(timeout)}, auth...)
	nc, err := nats.Connect(*f.servers, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: connecting to %s: %w", cmd, *f.servers, err)
	}
	return nc, nil
}

const auditReadUsage = `usage:
  gatewayctl audit tail --nats URL [--since D] [--follow] [--stream AUDIT]
	print the audit events the JetStream stream holds from D ago on
	(default 10m), one JSON object a line, as the gateways sent them;
	with --follow, then every new event until interrupted.
  gatewayctl audit count --nats URL [--since D] [--client-request-id ID] [--stream AUDIT]
	count the events of the last D (default: all the stream holds),
	or only those whose client_request_id is ID; prints the total and
	the count per node (the gateway that recorded them) and decision.
No nats CLI is needed. Connection flags: --creds, --nkey,
--user/--password, --token, --tls, --tls-ca, --tls-cert/--tls-key,
--tls-server-name (as gatewayctl fleet init).
`

// auditReader is what tail and count share: the stream and where to
// start.
type auditReader struct {
	js     jetstream.JetStream
	stream string
	since  time.Duration
}

func parseAuditRead(name string, args []string, out io.Writer, extra func(fs *flag.FlagSet)) (r *auditReader, nc *nats.Conn, done bool, err error) {
	fs := flag.NewFlagSet("audit "+name, flag.ContinueOnError)
	nf := addNATSFlags(fs, "NATS server URLs, comma-separated (required)")
	stream := fs.String("stream", "AUDIT", "the audit stream (the nats sink's stream)")
	defSince := time.Duration(0)
	if name == "tail" {
		defSince = 10 * time.Minute
	}
	since := fs.Duration("since", defSince, "read the events of this long ago on (0: all the stream holds)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of connecting and of each read")
	if extra != nil {
		extra(fs)
	}
	if done, err := parseFlags(fs, args, auditReadUsage, out); done {
		return nil, nil, true, err
	}
	if fs.NArg() > 0 {
		return nil, nil, true, fmt.Errorf("audit %s: unexpected argument %q (gatewayctl audit %s -h for help)", name, fs.Arg(0), name)
	}
	if *since < 0 {
		return nil, nil, true, fmt.Errorf("audit %s: invalid --since %v: must not be negative", name, *since)
	}
	nc, err = nf.connect("audit "+name, *timeout)
	if err != nil {
		return nil, nil, true, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, true, err
	}
	return &auditReader{js: js, stream: *stream, since: *since}, nc, false, nil
}

// read calls fn with each event of the stream from since on, up to the
// last one stored when it began; with follow, then with every new one
// until ctx ends.
func (r *auditReader) read(ctx context.Context, follow bool, fn func(data []byte) error) error {
	st, err := r.js.Stream(ctx, r.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("no stream %q (gatewayctl fleet init creates it; --stream names another)", r.stream)
	}
	if err != nil {
		return fmt.Errorf("stream %q: %w", r.stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %q: %w", r.stream, err)
	}
	last := info.State.LastSeq
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if r.since > 0 {
		t := time.Now().Add(-r.since)
		cfg = jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t}
	}
	if !follow && (info.State.Msgs == 0 || (r.since > 0 && info.State.LastTime.Before(time.Now().Add(-r.since)))) {
		return nil // nothing in the window
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("stream %q: %w", r.stream, err)
	}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if err := fn(m.Data()); err != nil {
				return err
			}
			if md, err := m.Metadata(); err == nil && !follow && md.Sequence.Stream >= last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if n == 0 && !follow {
			return nil // the window's events were removed meanwhile (max age)
		}
	}
}

func cmdAuditTail(args []string, out io.Writer) error {
	var follow *bool
	r, nc, done, err := parseAuditRead("tail", args, out, func(fs *flag.FlagSet) {
		follow = fs.Bool("follow", false, "then print new events until interrupted")
	})
	if done {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return r.read(ctx, *follow, func(data []byte) error {
		_, err := fmt.Fprintf(out, "%s\n", data)
		return err
	})
}

func cmdAuditCount(args []string, out io.Writer) error {
	var crid *string
	r, nc, done, err := parseAuditRead("count", args, out, func(fs *flag.FlagSet) {
		crid = fs.String("client-request-id", "", "count only the events with this client_request_id")
	})
	if done {
		return err
	}
	defer nc.Close()
	total := 0
	byNode, byDecision := map[string]int{}, map[string]int{}
	err = r.read(context.Background(), false, func(data []byte) error {
		var ev struct {
			Kind            string `json:"kind"`
			Node            string `json:"node"`
			Decision        string `json:"decision"`
			ClientRequestID string `json:"client_request_id"`
		}
		if json.Unmarshal(data, &ev) != nil || ev.Kind != "" {
			return nil // not a request event (a chain's record, a notice)
		}
		if *crid != "" && ev.ClientRequestID != *crid {
			return nil
		}
		total++
		byNode[ev.Node]++
		byDecision[ev.Decision]++
		return nil
	})
	if err != nil {
		return fmt.Errorf("audit count: %w", err)
	}
	if _, err := fmt.Fprintf(out, "events %d\n", total); err != nil {
		return err
	}
	for _, part := range []struct {
		name string
		m    map[string]int
	}{{"node", byNode}, {"decision", byDecision}} {
		keys := make([]string, 0, len(part.m))
		for k := range part.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			label := k
			if label == "" {
				label = "(none)"
			}
			if _, err := fmt.Fprintf(out, "%s %s %d\n", part.name, label, part.m[k]); err != nil {
				return err
			}
		}
	}
	return nil
}
