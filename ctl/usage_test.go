package ctl

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/apigate/gateway/caddyquota/quotausage"
)

// TestUsage: gatewayctl usage asks the admin API's /gateway/usage with
// the flags as query parameters and prints its document as tables (or
// as it is with --json); an error of the admin API is the command's.
// (The worked example of docs/caddyquota.md runs it against a gateway.)
func TestUsage(t *testing.T) {
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RequestURI())
		if r.URL.Path != quotausage.Path {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		switch q.Get("consumer") {
		case "":
			json.NewEncoder(w).Encode(quotausage.List{Timezone: "UTC", Date: "2026-12-01", Month: "2026-12", Consumers: 1, Shown: 1,
				Items: []quotausage.Summary{{Consumer: "alice", Plan: "free", Day: 3, Month: 40, Refused: 1, Limit: "3/day", Used: 1}}})
		case "alice":
			json.NewEncoder(w).Encode(quotausage.Consumer{Consumer: "alice", Plan: "free", Plans: []string{"free"}, Timezone: "UTC",
				From: q.Get("from"), To: "2026-12-01", Source: "fleet",
				Days:    []quotausage.Day{{Date: "2026-11-30", Plan: "free", Admitted: 37}, {Date: "2026-12-01", Plan: "free", Admitted: 3, Refused: 1}},
				Windows: []quotausage.Window{{Plan: "free", Window: "day", Limit: 3, Used: 3, Remaining: 0, Reset: "2026-12-02T00:00:00Z"}}})
		default:
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"from: invalid date"}`))
		}
	}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")

	var out strings.Builder
	if err := run([]string{"usage", "--admin", admin, "--consumer", "alice", "--from", "2026-11-01"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"consumer alice, plan free (2026-11-01 to 2026-12-01, UTC, counts: fleet)",
		"free day  3      3     0          2026-12-02T00:00:00Z", "2026-11-30  free  37        0", "2026-12-01  free  3         1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if asked[0] != "/gateway/usage?consumer=alice&from=2026-11-01" {
		t.Errorf("asked %s", asked[0])
	}

	out.Reset()
	if err := run([]string{"usage", "--admin", admin}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "alice     free  3      40     1              3/day 100%") {
		t.Errorf("list:\n%s", out.String())
	}

	out.Reset()
	if err := run([]string{"usage", "--admin", admin, "--consumer", "alice", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var doc quotausage.Consumer
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil || doc.Consumer != "alice" {
		t.Errorf("--json: %v %q", err, out.String())
	}

	err := run([]string{"usage", "--admin", admin, "--consumer", "bob"}, &out)
	if err == nil || !strings.Contains(err.Error(), "400: from: invalid date") {
		t.Errorf("an admin API error: %v", err)
	}
	if err := run([]string{"usage", "--admin", "127.0.0.1:1"}, &out); err == nil || !strings.Contains(err.Error(), "reading usage from the admin API at 127.0.0.1:1") {
		t.Errorf("no admin API: %v", err)
	}
	// without --admin: $CADDY_ADMIN, as Caddy's own commands
	t.Setenv("CADDY_ADMIN", admin)
	out.Reset()
	if err := run([]string{"usage"}, &out); err != nil || !strings.Contains(out.String(), "alice") {
		t.Errorf("usage with CADDY_ADMIN=%s: %v\n%s", admin, err, out.String())
	}
}
