package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportBase: a report is named by its date and short label; a run
// limited by -only or -skip without a label never takes the day's full
// report's name, and the rows it ran are not in the name.
func TestReportBase(t *testing.T) {
	for _, tc := range []struct {
		label, only string
		skipped     []string
		quick       bool
		want        string
	}{
		{"", "", nil, false, "2026-12-05"},
		{"h2", "nginx-h2,haproxy-h2,gw-caddy-h2,gw-fast-h2,gw-fast-all-h2,gw-fast-h3", nil, false, "2026-12-05-h2"},
		{"", "gw, gw-fast", nil, false, "2026-12-05-only"},
		{"", "", []string{"discovery", "ops"}, false, "2026-12-05-skip"},
		{"", "idle", nil, true, "2026-12-05-only-quick"},
		{"issue48", "", []string{"ops"}, true, "2026-12-05-issue48-quick"},
	} {
		if got := reportBase("2026-12-05", tc.label, tc.only, tc.skipped, tc.quick); got != tc.want {
			t.Errorf("reportBase(label %q, only %q, skip %q, quick %v) = %q, want %q", tc.label, tc.only, tc.skipped, tc.quick, got, tc.want)
		}
	}
}

func TestCleanLabel(t *testing.T) {
	for _, ok := range []string{"", "h2", "issue-48", "quota2"} {
		if got, err := cleanLabel(ok); err != nil || got != ok {
			t.Errorf("cleanLabel(%q) = %q, %v; want it accepted", ok, got, err)
		}
	}
	for _, bad := range []string{"H2", "h2 run", "a/b", "-h2", "h2-", strings.Repeat("x", maxLabel+1)} {
		if _, err := cleanLabel(bad); err == nil || !strings.Contains(err.Error(), "-label") {
			t.Errorf("cleanLabel(%q): error %v, want one naming -label", bad, err)
		}
	}
}

// TestIndexKeptByTheTool: write lists every report in the index, newest
// first, with its label, command and targets; a second run the same day
// gets a name of its own instead of overwriting the first.
func TestIndexKeptByTheTool(t *testing.T) {
	dir := t.TempDir()
	// an older report already there, from before labels
	old := Report{Date: "2026-12-01", Command: "ONLY=idle bench/run", Targets: []TargetResult{{Status: "met"}, {Status: "met"}, {Status: "missed"}}}
	js, _ := json.Marshal(old)
	for name, body := range map[string][]byte{"2026-12-01-only-idle.json": js, "2026-12-01-only-idle.md": []byte("# old\n"), "soak.csv": []byte("x\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		b := &Bench{Root: dir, Results: dir, Label: "h2", Only: "gw-fast-h2", report: &Report{
			Date: "2026-12-05", Label: "h2", Command: "LABEL=h2 ONLY=gw-fast-h2 bench/run", Note: "a | b",
			Targets: []TargetResult{{Status: "met"}},
		}}
		if err := b.write(); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"2026-12-05-h2.md", "2026-12-05-h2.json", "2026-12-05-h2-2.md", "2026-12-05-h2-2.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("after two runs labelled h2: %v", err)
		}
	}
	idx, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(idx)
	rows := []string{
		"| [2026-12-05-h2-2](2026-12-05-h2-2.md) | 2026-12-05 | h2 | `LABEL=h2 ONLY=gw-fast-h2 bench/run` | 1 met | a \\| b |",
		"| [2026-12-05-h2](2026-12-05-h2.md) | 2026-12-05 | h2 |",
		"| [2026-12-01-only-idle](2026-12-01-only-idle.md) | 2026-12-01 |  | `ONLY=idle bench/run` | 2 met, 1 missed |  |",
	}
	last := -1
	for _, r := range rows {
		i := strings.Index(s, r)
		if i < 0 {
			t.Fatalf("index lacks the row %q:\n%s", r, s)
		}
		if i < last {
			t.Fatalf("index not newest first:\n%s", s)
		}
		last = i
	}
	if strings.Contains(s, "soak") {
		t.Fatalf("index lists a file that is not a report:\n%s", s)
	}
}
