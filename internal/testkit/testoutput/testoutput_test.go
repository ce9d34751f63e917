package testoutput

import (
	"fmt"
	"strings"
	"testing"
)

// TestKeepsWhy: past the head, the lines kept from the middle of a long
// output are the test's own lines (a subtest's too, and a message's
// continuation lines), --- FAIL lines, a line written in parts, and a
// panic with at most panicLines lines of its stack; noise is counted.
func TestKeepsWhy(t *testing.T) {
	noise := func(o *Output, when string, n int) {
		for i := range n {
			o.Add(fmt.Sprintf("noise %s %d\n", when, i))
		}
	}
	for _, tc := range []struct {
		name  string
		lines []string
		kept  []string
		gone  []string
	}{
		{"a test's line and its continuation", []string{"    a_test.go:1: got 1\n", "        want 2\n", "        (more)\n"},
			[]string{"    a_test.go:1: got 1\n        want 2\n        (more)\n"}, nil},
		{"a subtest's line and --- FAIL", []string{"        a_test.go:2: sub failed\n", "    --- FAIL: TestA/sub (0.00s)\n"},
			[]string{"        a_test.go:2: sub failed\n    --- FAIL: TestA/sub (0.00s)\n"}, nil},
		{"a line written in parts", []string{"    a_test.go:3: a long ", "message\n", "plain noise after\n"},
			[]string{"    a_test.go:3: a long message\n"}, []string{"plain noise after"}},
		{"a panic and its stack, not more", append([]string{"panic: boom\n"}, stack(150)...),
			[]string{"panic: boom\nframe 0\n", fmt.Sprintf("frame %d\n", panicLines-1)}, []string{fmt.Sprintf("frame %d\n", panicLines)}},
		{"a fatal error", []string{"fatal error: concurrent map writes\n"}, []string{"fatal error: concurrent map writes\n"}, nil},
		{"an indented line after noise is noise", []string{"        indented noise\n"}, nil, []string{"indented noise"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Output{HeadMax: 100, TailMax: 100, WhyMax: 1 << 20}
			noise(o, "before", 50)
			for _, l := range tc.lines {
				o.Add(l)
			}
			noise(o, "after", 50)
			s := o.String()
			for _, k := range tc.kept {
				if !strings.Contains(s, k) {
					t.Errorf("lacks %q:\n%s", k, s)
				}
			}
			for _, g := range tc.gone {
				if strings.Contains(s, g) {
					t.Errorf("keeps %q:\n%s", g, s)
				}
			}
			if strings.Contains(s, "noise before 25\n") || !strings.Contains(s, "lines left out ...]") {
				t.Errorf("the noise of the middle is not left out and counted:\n%s", s)
			}
		})
	}
}

func stack(n int) []string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprintf("frame %d\n", i))
	}
	return s
}

// TestShort: an output within the head is kept whole, with no marker.
func TestShort(t *testing.T) {
	var o Output
	in := "=== RUN   TestA\n    a_test.go:1: bad\n--- FAIL: TestA (0.00s)\n"
	o.Add(in)
	if got := o.String(); got != in {
		t.Errorf("got %q, want %q", got, in)
	}
}
