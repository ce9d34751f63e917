// Command testsummary reads `go test -json` from standard input, prints the
// output of failed and skipped tests (of a long output, the beginning, the
// lines that say why the test failed and the end: testoutput), the slowest top-level tests (so a
// developer sees where the suite's time goes), and a closing line
// "N passed, N failed, N skipped". It exits 1 when a test or package failed,
// or when a test skipped without being listed in the allow-list file given as
// its argument (one Go regular expression per line matching "pkg.TestName"):
// a required test that silently skips is a failure.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/apigate/gateway/internal/testkit/testoutput"
)

type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	var allowed []*regexp.Regexp
	if len(os.Args) > 1 {
		b, err := os.ReadFile(os.Args[1])
		if err != nil && !os.IsNotExist(err) {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			re, err := regexp.Compile(line)
			if err != nil {
				fmt.Fprintf(os.Stderr, "testsummary: allow-list line %q: %v\n", line, err)
				os.Exit(2)
			}
			allowed = append(allowed, re)
		}
	}
	os.Exit(summarize(os.Stdin, os.Stdout, allowed))
}

// slowestShown is how many of the slowest tests summarize lists.
const slowestShown = 10

// timing is one finished top-level test and its wall time in seconds.
type timing struct {
	name    string
	elapsed float64
}

// slowest returns the n longest of ts, longest first (ties by name, so the
// list is stable from run to run).
func slowest(ts []timing, n int) []timing {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].elapsed != ts[j].elapsed {
			return ts[i].elapsed > ts[j].elapsed
		}
		return ts[i].name < ts[j].name
	})
	if len(ts) > n {
		ts = ts[:n]
	}
	return ts
}

func summarize(in io.Reader, out io.Writer, allowed []*regexp.Regexp) int {
	outputs := map[string]*testoutput.Output{}
	// Top-level tests only: a subtest's time is already inside its
	// parent's. Not in its Elapsed, though, when the subtests are parallel
	// (go test reports the parent's own run, which ends before theirs):
	// a test's time is from its run event to its end.
	var timings []timing
	began := map[string]time.Time{}
	wall := func(ev event, key string) float64 {
		el := ev.Elapsed
		if b, ok := began[key]; ok && !ev.Time.IsZero() {
			el = max(el, ev.Time.Sub(b).Seconds())
		}
		return el
	}
	var passed, failed, skipped int
	var failedNames, badSkips, okSkips, failedPkgs []string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			// build errors and other non-JSON lines
			fmt.Fprintln(out, string(line))
			continue
		}
		key := ev.Package + "." + ev.Test
		switch ev.Action {
		case "run":
			if ev.Test != "" && !strings.Contains(ev.Test, "/") && !ev.Time.IsZero() {
				began[key] = ev.Time
			}
		case "output":
			b := outputs[key]
			if b == nil {
				b = new(testoutput.Output)
				outputs[key] = b
			}
			b.Add(ev.Output)
		case "pass":
			if ev.Test != "" {
				passed++
				if !strings.Contains(ev.Test, "/") {
					timings = append(timings, timing{key, wall(ev, key)})
				}
			} else {
				fmt.Fprintf(out, "ok   %s (%.1fs)\n", ev.Package, ev.Elapsed)
			}
			delete(outputs, key)
		case "fail":
			if ev.Test != "" {
				failed++
				failedNames = append(failedNames, key)
				if !strings.Contains(ev.Test, "/") {
					timings = append(timings, timing{key, wall(ev, key)})
				}
			} else {
				failedPkgs = append(failedPkgs, ev.Package)
				fmt.Fprintf(out, "FAIL %s (%.1fs)\n", ev.Package, ev.Elapsed)
			}
			if b := outputs[key]; b != nil {
				fmt.Fprintf(out, "--- output of %s:\n%s\n", key, b.String())
			}
			delete(outputs, key)
		case "skip":
			if ev.Test == "" {
				delete(outputs, key)
				continue
			}
			skipped++
			ok := false
			for _, re := range allowed {
				if re.MatchString(key) {
					ok = true
					break
				}
			}
			msg := ""
			if b := outputs[key]; b != nil {
				msg = strings.TrimSpace(b.String())
			}
			if ok {
				okSkips = append(okSkips, key+": "+msg)
			} else {
				badSkips = append(badSkips, key+": "+msg)
			}
			delete(outputs, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary: reading input:", err)
		return 2
	}
	sort.Strings(okSkips)
	for _, s := range okSkips {
		fmt.Fprintln(out, "allowed skip:", s)
	}
	sort.Strings(badSkips)
	for _, s := range badSkips {
		fmt.Fprintln(out, "SKIPPED (not allowed):", s)
	}
	if ts := slowest(timings, slowestShown); len(ts) > 0 {
		fmt.Fprintf(out, "slowest %d tests:\n", len(ts))
		for _, t := range ts {
			fmt.Fprintf(out, "  %7.1fs  %s\n", t.elapsed, t.name)
		}
	}
	for _, n := range failedNames {
		fmt.Fprintln(out, "FAILED:", n)
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || len(failedPkgs) > 0 || len(badSkips) > 0 || passed == 0 {
		return 1
	}
	return 0
}
