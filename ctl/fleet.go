package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

const fleetUsage = `usage:
  gatewayctl fleet init --nats URL[,URL...] [--replicas N] [flags]
	create, on the fleet's NATS JetStream, the stream and the buckets the
	gateways use (docs/fleet.md), each with N replicas:
	  AUDIT                      the audit nats sink's stream (subject gateway.audit,
	                             duplicate window 2m, kept 7 days)
	  gateway_storage            storage nats: certificates, rate_limit state
	  gateway_storage_locks      storage nats: locks (entries expire after --lock-ttl)
	  gateway_routes             docker { fleet }: each host's containers (max age 4 x --fleet-ttl)
	  gateway_routes_rate_limit  rate_limit labels: each client's counts and leases (max age 8 days)
	  gateway_quota              quota { fleet }: consumers' counts and leases (max age
	                             --quota-retention)
	What exists is left as it is, and its replicas are printed. --replicas
	defaults to 3 on a NATS cluster of 3 or more servers, else 1. The
	gateways also create what is missing themselves (with 1 replica where
	the cluster is too small); run this first to choose the replicas.
	example: gatewayctl fleet init --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --replicas 3
`

func cmdFleet(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("fleet needs init\n" + fleetUsage)
	}
	switch {
	case args[0] == "init":
		return cmdFleetInit(args[1:], out)
	case isHelp(args[0]):
		return writeHelp(out, fleetUsage)
	}
	return fmt.Errorf("unknown fleet command %q: want init (gatewayctl fleet -h for help)", args[0])
}

// fleetSetup is what fleet init creates.
type fleetSetup struct {
	replicas                  int
	auditStream, auditSubject string
	auditMaxAge, dupeWindow   time.Duration
	storageBucket             string
	lockTTL                   time.Duration
	fleetBucket               string
	fleetTTL                  time.Duration
	quotaBucket               string
	quotaRetention            time.Duration
}

func cmdFleetInit(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fleet init", flag.ContinueOnError)
	nf := addNATSFlags(fs, "NATS server URLs, comma-separated (required)")
	replicas := fs.Int("replicas", 0, "replicas of the stream and buckets (default: 3 on a cluster of 3 or more, else 1)")
	var s fleetSetup
	fs.StringVar(&s.auditStream, "audit-stream", "AUDIT", "the audit stream")
	fs.StringVar(&s.auditSubject, "audit-subject", "gateway.audit", "the audit sink's subject")
	fs.DurationVar(&s.auditMaxAge, "audit-max-age", 7*24*time.Hour, "how long the stream keeps events")
	fs.DurationVar(&s.dupeWindow, "dupe-window", 2*time.Minute, "the stream's duplicate window (a retried event within it is stored once)")
	fs.StringVar(&s.storageBucket, "storage-bucket", "gateway_storage", "storage nats's bucket (locks: <bucket>_locks)")
	fs.DurationVar(&s.lockTTL, "lock-ttl", 30*time.Second, "storage nats's lock_ttl")
	fs.StringVar(&s.fleetBucket, "fleet-bucket", "gateway_routes", "docker fleet's bucket")
	fs.DurationVar(&s.fleetTTL, "fleet-ttl", 15*time.Second, "docker fleet's ttl")
	fs.StringVar(&s.quotaBucket, "quota-bucket", "gateway_quota", "quota fleet's bucket")
	fs.DurationVar(&s.quotaRetention, "quota-retention", 100*24*time.Hour, "how long the quota's counts are kept (the quota's retention)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of the whole setup")
	if done, err := parseFlags(fs, args, fleetUsage, out); done {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), fleetUsage)
	}
	if *replicas < 0 || *replicas > 5 {
		return fmt.Errorf("fleet init: invalid --replicas %d: 1 to 5", *replicas)
	}
	nc, err := nf.connect("fleet init", *timeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s.replicas = *replicas
	if s.replicas == 0 {
		s.replicas = 1
		if nc.ConnectedClusterName() != "" && len(nc.Servers()) >= 3 {
			s.replicas = 3
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return s.apply(ctx, js, out)
}

// apply creates what is missing and reports each object.
func (s fleetSetup) apply(ctx context.Context, js jetstream.JetStream, out io.Writer) error {
	stream := jetstream.StreamConfig{
		Name:        s.auditStream,
		Description: "audit events of the apigate fleet (the audit nats sink)",
		Subjects:    []string{s.auditSubject},
		Storage:     jetstream.FileStorage,
		Replicas:    s.replicas,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      s.auditMaxAge,
		Duplicates:  s.dupeWindow,
	}
	if st, err := js.Stream(ctx, stream.Name); err == nil {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream.Name, err)
		}
		fmt.Fprintf(out, "stream %s exists (%s); left as it is\n", stream.Name, plural(info.Config.Replicas, "replica"))
	} else if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, stream); err != nil {
			return fmt.Errorf("creating stream %s: %w%s", stream.Name, err, s.replicasHint())
		}
		fmt.Fprintf(out, "created stream %s: subject %s, %s, duplicate window %v, max age %v\n",
			stream.Name, s.auditSubject, plural(s.replicas, "replica"), s.dupeWindow, s.auditMaxAge)
	} else {
		return fmt.Errorf("stream %s: %w", stream.Name, err)
	}
	for _, kv := range []jetstream.KeyValueConfig{
		{Bucket: s.storageBucket, Description: "Caddy storage (certificates, rate limit state) of the apigate fleet"},
		{Bucket: s.storageBucket + "_locks", TTL: s.lockTTL, Description: "Caddy storage locks of the apigate fleet (entries expire unless refreshed)"},
		{Bucket: s.fleetBucket, TTL: 4 * s.fleetTTL, Description: "containers of each gateway's host (apigate fleet discovery; one key per node)"},
		{Bucket: s.fleetBucket + "_rate_limit", TTL: 8 * 24 * time.Hour, Description: "apigate rate_limit label counts: per client and route, each gateway's tokens (leases of the quota's fleet)"},
		{Bucket: s.quotaBucket, TTL: s.quotaRetention, Description: "apigate quota counts: per consumer and month, each gateway's tokens and usage"},
	} {
		kv.History, kv.Storage, kv.Replicas = 1, jetstream.FileStorage, s.replicas
		if b, err := js.KeyValue(ctx, kv.Bucket); err == nil {
			st, err := b.Status(ctx)
			if err != nil {
				return fmt.Errorf("bucket %s: %w", kv.Bucket, err)
			}
			replicas := 0
			if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok && bs.StreamInfo() != nil {
				replicas = bs.StreamInfo().Config.Replicas
			}
			fmt.Fprintf(out, "bucket %s exists (%s); left as it is\n", kv.Bucket, plural(replicas, "replica"))
			continue
		} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("bucket %s: %w", kv.Bucket, err)
		}
		if _, err := js.CreateKeyValue(ctx, kv); err != nil {
			return fmt.Errorf("creating bucket %s: %w%s", kv.Bucket, err, s.replicasHint())
		}
		ttl := ""
		if kv.TTL > 0 {
			ttl = fmt.Sprintf(", max age %v", kv.TTL)
		}
		fmt.Fprintf(out, "created bucket %s: %s%s\n", kv.Bucket, plural(s.replicas, "replica"), ttl)
	}
	return nil
}

// replicasHint suggests fewer replicas when more than one failed (a
// cluster too small for them is the usual cause).
func (s fleetSetup) replicasHint() string {
	if s.replicas <= 1 {
		return ""
	}
	return fmt.Sprintf(" (if the NATS servers cannot place %d replicas, give --replicas at most the number of JetStream servers: 1 on a single server)", s.replicas)
}
