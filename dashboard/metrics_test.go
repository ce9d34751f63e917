package dashboard

import (
	"testing"

	"github.com/apigate/gateway/caddyaudit"
	"github.com/apigate/gateway/caddyjwt"
	"github.com/apigate/gateway/caddypermcache"
)

func TestCountersFrom(t *testing.T) {
	t.Run("every duty", func(t *testing.T) {
		jwt := caddyjwt.Stats{
			Results:   map[string]float64{"valid: ok": 90, "invalid: token expired": 4, "missing: missing token": 6},
			Valid:     90,
			Rejected:  10,
			CacheHits: 75, CacheMisses: 25,
		}
		rbac := map[string]float64{"allow": 80, "deny_role": 7, "deny_scope": 3, "dry_run_deny_role": 2}
		perm := caddypermcache.Stats{HitsAllow: 30, HitsDeny: 10, Misses: 10, StaleServes: 2, OnErrorDeny: 1,
			Denied: 11, Unavailable: 1, WouldDeny: 4}
		sinks := []caddyaudit.SinkStats{
			{Name: "b", Type: "file", Enqueued: 100, Dropped: 1},
			{Name: "a", Type: "http", Enqueued: 100, Sent: 95, QueueDepth: 5, BacklogAgeSeconds: 7, SpoolBytes: 4096},
		}
		got := CountersFrom(jwt, rbac, perm, sinks, map[string]float64{"routes": 3})
		checks := []struct {
			name      string
			got, want float64
		}{
			{"requests (busiest audit sink)", got.Requests, 100},
			{"denials (enforced)", got.Denials, 4 + 6 + 7 + 3 + 11 + 1},
			{"would deny (dry run)", got.WouldDeny, 2 + 4},
			{"jwt valid", got.JWT.Valid, 90},
			{"jwt rejected", got.JWT.Rejected, 10},
			{"jwt expired", got.JWT.Results["invalid: token expired"], 4},
			{"jwt hit rate", *got.JWT.CacheHitRate, 0.75},
			{"perm hit rate", *got.Permission.CacheHitRate, 0.8},
			{"perm stale", got.Permission.StaleServes, 2},
			{"audit backlog", got.Audit.Backlog, 5},
			{"audit backlog age", got.Audit.BacklogAgeSeconds, 7},
			{"audit spool bytes", got.Audit.Sinks[0].SpoolBytes, 4096},
			{"audit sent", got.Audit.Sent, 95},
			{"audit dropped", got.Audit.Dropped, 1},
			{"docker routes", got.Docker["routes"], 3},
		}
		for _, ck := range checks {
			if ck.got != ck.want {
				t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
			}
		}
		if got.RequestsSource != "audit events enqueued" {
			t.Errorf("requests source %q", got.RequestsSource)
		}
		if len(got.Audit.Sinks) != 2 || got.Audit.Sinks[0].Name != "a" || got.Audit.Sinks[0].QueueDepth != 5 {
			t.Errorf("sinks = %+v", got.Audit.Sinks)
		}
	})
	t.Run("without audit, jwt_auth counts the requests", func(t *testing.T) {
		got := CountersFrom(caddyjwt.Stats{Results: map[string]float64{"valid: ok": 40, "missing: missing token": 2}}, nil, caddypermcache.Stats{}, nil, nil)
		if got.Requests != 42 || got.RequestsSource != "jwt_auth verifications" {
			t.Errorf("requests = %v from %s", got.Requests, got.RequestsSource)
		}
	})
	t.Run("nothing", func(t *testing.T) {
		got := CountersFrom(caddyjwt.Stats{}, nil, caddypermcache.Stats{}, nil, nil)
		if got.Requests != 0 || got.JWT.CacheHitRate != nil || got.Audit.Sinks == nil || got.RBAC == nil || got.JWT.Results == nil {
			t.Errorf("CountersFrom(nothing) = %+v", got)
		}
	})
}

// TestReadCountersFromModules: the counters the modules count reach the
// dashboard through their own snapshots (no metric names).
func TestReadCountersFromModules(t *testing.T) {
	before := ReadCounters()
	if before.JWT.Results == nil || before.RBAC == nil || before.Docker == nil {
		t.Fatalf("ReadCounters() = %+v", before)
	}
}
