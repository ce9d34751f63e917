package caddyquota

import (
	"flag"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	_ "github.com/apigate/gateway/caddyapikey"    // the golden file's identity source
	_ "github.com/apigate/gateway/caddypermcache" // and permission, which quota follows
	"github.com/apigate/gateway/internal/natsconn"
	"github.com/apigate/gateway/internal/testkit/goldentest"
)

// TestUnmarshalGlobalOption: the quota global option, every setting,
// and the errors a bad line gets (each names what was wrong).
func TestUnmarshalGlobalOption(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        App
		wantErr     string
	}{
		{name: "the issue's example", input: "quota {\n plan free {\n  limit 1000/day\n }\n plan pro {\n  limit 100000/day 2000000/month\n }\n default free\n}",
			want: App{Plans: map[string]PlanConfig{"free": {Limits: []string{"1000/day"}}, "pro": {Limits: []string{"100000/day", "2000000/month"}}}, Default: "free"}},
		{name: "plan on one line, every option", input: `quota {
	plan burst 60/minute 5_000/hour
	plan_claim account.plan
	timezone Europe/Berlin
	on_unavailable fail_closed 1/3
	dir /var/lib/gateway/quota
	max_consumers 100_000
	retention 90d
	sync_interval 500ms
	consumer_metrics 50
	fleet nats://a:4222 {
		nats nats://b:4222
		bucket quota_counts
		replicas 3
		node gw-1
		max_lease 200
		sync_interval 250ms
		lease_wait 300ms
	}
}`, want: App{Plans: map[string]PlanConfig{"burst": {Limits: []string{"60/minute", "5_000/hour"}}}, PlanClaim: "account.plan", Timezone: "Europe/Berlin",
			OnUnavailable: FailClosed, UnavailableShare: 1.0 / 3, Dir: "/var/lib/gateway/quota", MaxConsumers: 100000,
			Retention: caddy.Duration(90 * 24 * time.Hour), SyncInterval: caddy.Duration(500 * time.Millisecond), ConsumerMetrics: 50,
			Fleet: &FleetConfig{Config: natsconn.Config{Servers: []string{"nats://a:4222", "nats://b:4222"}}, Bucket: "quota_counts", Replicas: 3, Node: "gw-1", MaxLease: 200,
				SyncInterval: caddy.Duration(250 * time.Millisecond), LeaseWait: caddy.Duration(300 * time.Millisecond)}}},
		{name: "fleet connection block", input: `quota {
	plan a 1/day
	fleet {
		servers nats://a:4222
		creds_file /c.creds
		tls {
			ca /ca.pem
			server_name nats.internal
		}
		name gw-quota
	}
}`, want: App{Plans: map[string]PlanConfig{"a": {Limits: []string{"1/day"}}}, Fleet: &FleetConfig{Config: natsconn.Config{
			Servers: []string{"nats://a:4222"}, Creds: "/c.creds", Name: "gw-quota",
			TLS: &natsconn.TLSConfig{CA: "/ca.pem", ServerName: "nats.internal"}}}}},
		{name: "bad fleet tls", input: "quota {\n plan a 1/day\n fleet {\n  tls {\n   verify\n  }\n }\n}", wantErr: "unrecognized tls subdirective 'verify'"},
		{name: "share as a percentage", input: "quota {\n plan a 1/day\n on_unavailable fail_open 50%\n}",
			want: App{Plans: map[string]PlanConfig{"a": {Limits: []string{"1/day"}}}, OnUnavailable: FailOpen, UnavailableShare: 0.5}},
		{name: "a plan without limits meters", input: "quota {\n plan metered\n}", want: App{Plans: map[string]PlanConfig{"metered": {}}}},
		{name: "bad window", input: "quota {\n plan free 1000/week\n}", wantErr: `invalid limit "1000/week"`},
		{name: "bad count", input: "quota {\n plan free {\n  limit lots/day\n }\n}", wantErr: `invalid limit "lots/day": the count must be a whole number`},
		{name: "limit without a value", input: "quota {\n plan free {\n  limit\n }\n}", wantErr: "limit needs at least one <n>/<window>"},
		{name: "two limits per window", input: "quota {\n plan free 10/day 20/day\n}", wantErr: "two limits per day"},
		{name: "plan given twice", input: "quota {\n plan free 1/day\n plan free 2/day\n}", wantErr: "plan free given twice"},
		{name: "bad plan name", input: "quota {\n plan fr.ee 1/day\n}", wantErr: "fr.ee"},
		{name: "plan without a name", input: "quota {\n plan\n}", wantErr: "plan needs a name"},
		{name: "unknown plan subdirective", input: "quota {\n plan free {\n  burst 10\n }\n}", wantErr: "unrecognized plan subdirective 'burst'"},
		{name: "bad on_unavailable", input: "quota {\n plan a 1/day\n on_unavailable allow\n}", wantErr: `invalid on_unavailable "allow": want fail_open or fail_closed`},
		{name: "bad share", input: "quota {\n plan a 1/day\n on_unavailable fail_open 150%\n}", wantErr: `invalid share "150%"`},
		{name: "bad max_consumers", input: "quota {\n plan a 1/day\n max_consumers -5\n}", wantErr: `invalid max_consumers "-5"`},
		{name: "bad retention", input: "quota {\n plan a 1/day\n retention soon\n}", wantErr: `invalid retention "soon"`},
		{name: "bad fleet replicas", input: "quota {\n plan a 1/day\n fleet {\n  replicas 7\n }\n}", wantErr: "invalid replicas 7"},
		{name: "unknown fleet subdirective", input: "quota {\n plan a 1/day\n fleet {\n  leader me\n }\n}", wantErr: "unrecognized fleet subdirective 'leader'"},
		{name: "unknown subdirective", input: "quota {\n plan a 1/day\n burst 5\n}", wantErr: "unrecognized subdirective 'burst'"},
		{name: "bad timezone, with its line", input: "quota {\n plan a 1/day\n timezone Europe/Berln\n}", wantErr: `invalid timezone "Europe/Berln": want an IANA zone such as Europe/Berlin`},
		{name: "two plans and no default, with the option's line", input: "quota {\n plan a 1/day\n plan b 2/day\n}", wantErr: "2 plans and no default: name the plan of consumers without one (default <plan>), at Testfile:1"},
		{name: "no such default plan, with its line", input: "quota {\n plan a 1/day\n plan b 2/day\n default c\n}", wantErr: `invalid default "c": no such plan (plans: a, b), at Testfile:4`},
		{name: "argument on the option", input: "quota free {\n plan a 1/day\n}", wantErr: "wrong argument count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got App
			err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v (fleet %+v), want %+v (fleet %+v)", got, got.Fleet, tc.want, tc.want.Fleet)
			}
		})
	}
}

// TestCompile: settings the Caddyfile parser cannot judge alone (a
// default naming no plan, several plans without a default, a zone that
// does not exist) fail the config with an error naming them.
func TestCompile(t *testing.T) {
	two := map[string]PlanConfig{"free": {Limits: []string{"10/day"}}, "pro": {Limits: []string{"100/day"}}}
	for _, tc := range []struct {
		name    string
		app     App
		wantErr string
	}{
		{name: "no plan (handlers with their own)", app: App{}},
		{name: "two plans, no default", app: App{Plans: two}, wantErr: "2 plans and no default"},
		{name: "default names no plan", app: App{Plans: two, Default: "gold"}, wantErr: `invalid default "gold": no such plan (plans: free, pro)`},
		{name: "unknown zone", app: App{Plans: two, Default: "free", Timezone: "Mars/Olympus"}, wantErr: `invalid timezone "Mars/Olympus"`},
		{name: "short retention", app: App{Plans: two, Default: "free", Retention: caddy.Duration(30 * 24 * time.Hour)}, wantErr: "at least 62 days"},
		{name: "bad plan claim", app: App{Plans: two, Default: "free", PlanClaim: "a..b"}, wantErr: `invalid plan_claim "a..b"`},
		{name: "one plan is the default", app: App{Plans: map[string]PlanConfig{"free": {Limits: []string{"10/day"}}}}},
		{name: "zone", app: App{Plans: two, Default: "pro", Timezone: "America/New_York"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.app.compile()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.app.defaultPlan == nil && len(tc.app.Plans) > 0 {
					t.Fatal("no default plan")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestUnmarshalHandler(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		want        Handler
		wantErr     string
	}{
		{name: "defaults", input: "quota", want: Handler{}},
		{name: "every option", input: "quota {\n key {http.request.header.X-Tenant}\n plan bulk\n dry_run\n}",
			want: Handler{Key: "{http.request.header.X-Tenant}", Plan: "bulk", DryRun: true}},
		{name: "dry_run false", input: "quota {\n dry_run false\n}", want: Handler{}},
		{name: "key without a value", input: "quota {\n key\n}", wantErr: "wrong argument count"},
		{name: "argument", input: "quota free", wantErr: "wrong argument count"},
		{name: "unknown option", input: "quota {\n limit 10/day\n}", wantErr: "unrecognized subdirective 'limit'"},
		{name: "own plan on one line", input: "quota {\n key {http.vars.client_ip}\n plan per_ip 20/10s 1000/day\n}",
			want: Handler{Key: "{http.vars.client_ip}", Plan: "per_ip", Limits: []string{"20/10s", "1000/day"}}},
		{name: "own plan as a block", input: "quota {\n plan login {\n  limit 5/minute\n  limit 20/hour\n }\n}",
			want: Handler{Plan: "login", Limits: []string{"5/minute", "20/hour"}}},
		{name: "own plan, bad limit", input: "quota {\n plan api 20/week\n}", wantErr: `plan api: invalid limit "20/week"`},
		{name: "own plan, two of a window", input: "quota {\n plan api 20/10s 30/10s\n}", wantErr: "two limits per 10s"},
		{name: "plan twice", input: "quota {\n plan a\n plan b\n}", wantErr: "plan given twice"},
		{name: "key placeholder nothing sets, with its line", input: "quota {\n key {http.auth.usr.id}\n}",
			wantErr: `invalid key "{http.auth.usr.id}": no identity source sets {http.auth.usr.id} (did you mean {http.auth.user.id}?), at Testfile:2`},
		{name: "key with a known placeholder in text", input: "quota {\n key trial-{http.auth.api_key.id}\n}", want: Handler{Key: "trial-{http.auth.api_key.id}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Handler
			err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Key != tc.want.Key || got.Plan != tc.want.Plan || got.DryRun != tc.want.DryRun || fmt.Sprint(got.Limits) != fmt.Sprint(tc.want.Limits) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestValidateKey: a JSON config's key with a placeholder nothing sets
// fails Validate (Caddy calls it after Provision) as the Caddyfile does.
func TestValidateKey(t *testing.T) {
	if err := (&Handler{Key: "{http.auth.jwt.claim.tenant}"}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "did you mean {http.auth.jwt.claims.<name>}?") {
		t.Fatalf("err = %v", err)
	}
	if err := (&Handler{Key: DefaultKey}).Validate(); err != nil {
		t.Fatal(err)
	}
}

var update = flag.Bool("update", false, "rewrite the expected JSON of testdata/*.caddyfiletest")

// TestCaddyfileAdapt: the Caddyfile -> JSON golden files: the global
// option becomes the quota app, and the directive runs after the
// identity sources and the other duties, before what answers.
func TestCaddyfileAdapt(t *testing.T) {
	goldentest.Run(t, filepath.Join("testdata", "*.caddyfiletest"), *update, goldentest.Options{})
}
