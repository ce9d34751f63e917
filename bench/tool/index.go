package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// maxLabel bounds a report label: the name is a date and a word or two.
const maxLabel = 24

// cleanLabel checks -label: lower-case letters, digits and dashes, at most
// maxLabel of them, the short name a person reads in bench/results/.
func cleanLabel(label string) (string, error) {
	if label == "" {
		return "", nil
	}
	if len(label) > maxLabel {
		return "", fmt.Errorf("-label %q: at most %d characters (a short name such as h2 or issue48; the rows run are listed in the report)", label, maxLabel)
	}
	for _, r := range label {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return "", fmt.Errorf("-label %q: only lower-case letters, digits and '-' (it becomes part of a file name)", label)
		}
	}
	if strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
		return "", fmt.Errorf("-label %q: cannot begin or end with '-'", label)
	}
	return label, nil
}

// reportBase is a run's file name without extension: the date, then the
// label, or for a run limited by -only or -skip without one "only"/"skip"
// (never the day's full report's name), then "quick" for a quick run. The
// rows a run ran are listed in the report and in the index, not in its name.
func reportBase(date, label, only string, skipped []string, quick bool) string {
	base := date
	switch {
	case label != "":
		base += "-" + label
	case strings.Trim(only, ", ") != "":
		base += "-only"
	case len(skipped) > 0:
		base += "-skip"
	}
	if quick {
		base += "-quick"
	}
	return base
}

// freeBase returns base, or base-2, base-3, ... when a report of that name
// is already in dir: a second run on a day never overwrites the first.
func freeBase(dir, base string) string {
	for n := 1; ; n++ {
		b := base
		if n > 1 {
			b = fmt.Sprintf("%s-%d", base, n)
		}
		if _, err := os.Stat(filepath.Join(dir, b+".json")); errors.Is(err, os.ErrNotExist) {
			if _, err := os.Stat(filepath.Join(dir, b+".md")); errors.Is(err, os.ErrNotExist) {
				return b
			}
		}
	}
}

const indexHeader = `# Benchmark reports

Written by ` + "`benchtool`" + ` (bench/run) after every run, from the reports' JSON
files: do not edit by hand (` + "`bench/work/benchtool index bench/results`" + `
writes it again). A report is named by its date and the run's ` + "`-label`" + `
(` + "`LABEL=h2 bench/run`" + `); what it ran is in the command column.

| report | date | label | command | targets | note |
|---|---|---|---|---|---|
`

// writeIndex writes dir/README.md: one row per report (a .json with its
// .md beside it), newest first (by start, then name).
func writeIndex(dir string) error {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	type row struct {
		base, line string
		started    time.Time
	}
	var rows []row
	for _, js := range names {
		base := strings.TrimSuffix(filepath.Base(js), ".json")
		if _, err := os.Stat(filepath.Join(dir, base+".md")); err != nil {
			continue // not a report
		}
		r, err := loadReport(js)
		if err != nil {
			return fmt.Errorf("index: %s: %w", js, err)
		}
		rows = append(rows, row{base, fmt.Sprintf("| [%s](%s.md) | %s | %s | %s | %s | %s |",
			base, base, r.Date, cell(r.Label), cell("`"+r.Command+"`"), cell(targetCounts(r)), cell(r.Note)), r.Started})
	}
	sort.Slice(rows, func(i, j int) bool {
		if !rows[i].started.Equal(rows[j].started) {
			return rows[i].started.After(rows[j].started)
		}
		return rows[i].base > rows[j].base
	})
	var b strings.Builder
	b.WriteString(indexHeader)
	for _, r := range rows {
		b.WriteString(r.line + "\n")
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}

// targetCounts says how many targets each status has, e.g. "5 met, 1 missed".
func targetCounts(r *Report) string {
	counts := map[string]int{}
	var order []string
	for _, t := range r.Targets {
		if counts[t.Status] == 0 {
			order = append(order, t.Status)
		}
		counts[t.Status]++
	}
	var parts []string
	for _, s := range order {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	return strings.Join(parts, ", ")
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	if s == "``" {
		return ""
	}
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
