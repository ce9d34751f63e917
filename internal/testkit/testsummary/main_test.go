package main

import (
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
