package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	lines := func(ls ...string) string { return strings.Join(ls, "\n") + "\n" }
	tests := []struct {
		name    string
		in      string
		allowed []*regexp.Regexp
		code    int
		want    string
	}{
		{"all pass", lines(
			`{"Action":"pass","Package":"p","Test":"TestA"}`,
			`{"Action":"pass","Package":"p"}`), nil, 0, "1 passed, 0 failed, 0 skipped"},
		{"a failure", lines(
			`{"Action":"output","Package":"p","Test":"TestA","Output":"boom\n"}`,
			`{"Action":"fail","Package":"p","Test":"TestA"}`), nil, 1, "0 passed, 1 failed"},
		{"silent skip fails", lines(
			`{"Action":"pass","Package":"p","Test":"TestA"}`,
			`{"Action":"output","Package":"p","Test":"TestB","Output":"no podman\n"}`,
			`{"Action":"skip","Package":"p","Test":"TestB"}`), nil, 1, "SKIPPED (not allowed): p.TestB: no podman"},
		{"allowed skip", lines(
			`{"Action":"pass","Package":"p","Test":"TestA"}`,
			`{"Action":"skip","Package":"p","Test":"TestB"}`), []*regexp.Regexp{regexp.MustCompile(`^p\.TestB$`)}, 0, "allowed skip: p.TestB"},
		{"no tests ran", lines(`{"Action":"pass","Package":"p"}`), nil, 1, "0 passed"},
		{"build error", lines(`# p`, `{"Action":"fail","Package":"p"}`), nil, 1, "FAIL p"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			code := summarize(strings.NewReader(tc.in), &out, tc.allowed)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tc.code, out.String())
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out.String())
			}
		})
	}
}

func TestSlowest(t *testing.T) {
	var in strings.Builder
	// 12 top-level tests, TestT01 taking 1s ... TestT12 taking 12s, plus a
	// subtest slower than all of them (its time is inside its parent's, so
	// it must not be listed) and a failed test that is among the slowest.
	for i := 1; i <= 12; i++ {
		fmt.Fprintf(&in, `{"Action":"pass","Package":"p","Test":"TestT%02d","Elapsed":%d}`+"\n", i, i)
	}
	in.WriteString(`{"Action":"pass","Package":"p","Test":"TestT01/sub","Elapsed":99}` + "\n")
	in.WriteString(`{"Action":"fail","Package":"q","Test":"TestBad","Elapsed":11.5}` + "\n")
	in.WriteString(`{"Action":"pass","Package":"p","Elapsed":120}` + "\n")
	var out strings.Builder
	summarize(strings.NewReader(in.String()), &out, nil)
	got := out.String()
	i := strings.Index(got, "slowest 10 tests:\n")
	if i < 0 {
		t.Fatalf("no slowest list:\n%s", got)
	}
	var names []string
	for _, l := range strings.Split(got[i:], "\n")[1:] {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		f := strings.Fields(l)
		names = append(names, f[len(f)-1])
	}
	want := []string{"p.TestT12", "q.TestBad", "p.TestT11", "p.TestT10", "p.TestT09",
		"p.TestT08", "p.TestT07", "p.TestT06", "p.TestT05", "p.TestT04"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("slowest = %v, want %v; output:\n%s", names, want, got)
	}
	if !strings.Contains(got, "   12.0s  p.TestT12\n") {
		t.Errorf("time not shown as seconds:\n%s", got)
	}
}
