package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestLongOutputKeepsWhy: a failed test whose output is far longer than
// what the summary prints whole still shows, in order, its t.Error line
// (with the message's continuation line) from the middle of the output,
// the panic and its stack after megabytes of goroutine dumps' worth of
// logs, and its last lines; the noise between them is counted, not printed.
func TestLongOutputKeepsWhy(t *testing.T) {
	var in strings.Builder
	out := func(test, s string) {
		b, _ := json.Marshal(event{Action: "output", Package: "p", Test: test, Output: s})
		in.Write(append(b, '\n'))
	}
	noise := func(test string, n int) {
		for i := 0; i < n; i++ {
			out(test, fmt.Sprintf(`{"level":"info","msg":"noise line %d of a long log"}`+"\n", i))
		}
	}
	out("TestLong", "=== RUN   TestLong\n")
	noise("TestLong", 5000)
	out("TestLong", "    long_test.go:12: the reason: got 200\n")
	out("TestLong", "        want 503\n")
	noise("TestLong", 5000)
	out("TestLong", "--- FAIL: TestLong (9.00s)\n")
	in.WriteString(`{"Action":"fail","Package":"p","Test":"TestLong"}` + "\n")

	out("TestPanic", "=== RUN   TestPanic\n")
	noise("TestPanic", 5000)
	out("TestPanic", "panic: boom\n")
	out("TestPanic", "\n")
	out("TestPanic", "goroutine 7 [running]:\n")
	out("TestPanic", "p.TestPanic(0xc000102b60)\n")
	out("TestPanic", "\t/src/p/long_test.go:30 +0x25\n")
	noise("TestPanic", 5000) // other goroutines' stacks, say
	in.WriteString(`{"Action":"fail","Package":"p","Test":"TestPanic"}` + "\n")
	in.WriteString(`{"Action":"fail","Package":"p"}` + "\n")

	var got strings.Builder
	if code := summarize(strings.NewReader(in.String()), &got, nil); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	s := got.String()
	for _, want := range []string{
		"    long_test.go:12: the reason: got 200\n        want 503\n",
		"--- FAIL: TestLong (9.00s)\n",
		"panic: boom\n\ngoroutine 7 [running]:\np.TestPanic(0xc000102b60)\n\t/src/p/long_test.go:30 +0x25\n",
		"noise line 4999 of a long log", // the last lines, whole
		"lines left out ...]",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the summary lacks %q", want)
		}
	}
	if strings.Contains(s, "noise line 3000 of") {
		t.Error("the summary prints the middle of a long output")
	}
	if len(s) > 2*(64+32+256)<<10 {
		t.Errorf("the summary is %d bytes", len(s))
	}
	if i, j := strings.Index(s, "the reason"), strings.Index(s, "--- FAIL: TestLong"); i < 0 || j < i {
		t.Error("the t.Error line is not before the --- FAIL line")
	}
}
