package fleettest

import "testing"

// TestAloneShares: the shares a gateway's fleet log says it decided a
// consumer's day window alone on (two gateways' lines from the 2026-12-06
// runs of TestQuotaFleetKill that admitted 3,006 and 3,028), not another
// consumer's or window's, nor the other lines.
func TestAloneShares(t *testing.T) {
	log := `{"level":"debug","ts":1796601125.0251641,"logger":"quota.fleet","msg":"quota fleet: counts written","consumer":"acme","plan":"metered","window":"day","granted":50,"own_tokens":527,"others_tokens":421,"interrupted":false,"hold":false}
{"level":"warn","ts":1796601125.2996085,"logger":"quota.fleet","msg":"quota fleet counts unreachable: this gateway admits its share of each consumer's remaining quota alone","on_unavailable":"fail_closed","share":0.3333333333333333,"error":"no answer within lease_wait"}
{"level":"debug","ts":1796601125.2997508,"logger":"quota.fleet","msg":"quota fleet: deciding alone on a share","consumer":"acme","plan":"metered","window":"day","left_as_read":2052,"others_as_read":421,"own_tokens":527,"share":684,"read_age":0.327910569}
{"level":"debug","ts":1796601125.2997508,"logger":"quota.fleet","msg":"quota fleet: deciding alone on a share","consumer":"acme","plan":"metered","window":"month","left_as_read":2052,"others_as_read":421,"own_tokens":527,"share":9000,"read_age":0.327910569}
{"level":"debug","ts":1796601125.2997508,"logger":"quota.fleet","msg":"quota fleet: deciding alone on a share","consumer":"other","plan":"metered","window":"day","left_as_read":2052,"others_as_read":421,"own_tokens":527,"share":9000,"read_age":0.327910569}
{"level":"debug","ts":1796601515.4106884,"logger":"quota.fleet","msg":"quota fleet: deciding alone on a share","consumer":"acme","plan":"metered","window":"day","left_as_read":2122,"others_as_read":612,"own_tokens":266,"share":707,"read_age":0.871857341}
`
	cases := []struct {
		name     string
		log      string
		consumer string
		n        int
		sum      int64
	}{
		{"two shares of acme's day", log, "acme", 2, 684 + 707},
		{"none of a consumer that never went alone", log, "nobody", 0, 0},
		{"an empty log", "", "acme", 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if n, sum := aloneShares([]byte(tc.log), tc.consumer); n != tc.n || sum != tc.sum {
				t.Errorf("aloneShares = %d, %d; want %d, %d", n, sum, tc.n, tc.sum)
			}
		})
	}
}
