// Package testoutput keeps what a CI log shows of a failed test's output
// (`go test -json` output events): testsummary prints it for every failed
// test of the module, caddysuite for every failed test of Caddy's suite.
package testoutput

import (
	"fmt"
	"regexp"
	"strings"
)

// panicLines is how many lines after "panic: " (or "fatal error: ") count
// as saying why: the panicking goroutine's stack.
const panicLines = 100

// testLine is a line the testing package writes for t.Log, t.Error and
// t.Fatal ("    file_test.go:12: message"); the lines after it indented
// by eight spaces or more continue its message.
var testLine = regexp.MustCompile(`^ +[\w.-]+\.go:\d+: `)

// Output is what a log shows of one test's (or package's) output. A failing
// test's output can be megabytes of logs (Caddy's and the gateway
// processes'): all of it up to HeadMax bytes, then only the lines that say
// why it failed (its own t.Log/t.Error/t.Fatal lines, `--- FAIL` lines, a
// panic and its stack; WhyMax bytes at most), with a count of the lines
// left out, and the last TailMax bytes whole. So the reason is in the CI
// log however long the output, and the log stays readable. The zero
// Output keeps 64 KiB, 32 KiB and 256 KiB.
type Output struct {
	HeadMax, TailMax, WhyMax int

	head strings.Builder
	// mid holds the why-lines that fell out of the tail, in order, and
	// markers of how many lines were left out between them.
	mid      []string
	midBytes int
	left     int // lines left out since the last line of mid
	tail     []outLine
	tailFrom int // tail[:tailFrom] already moved out
	tailSize int
	// classifying state: the last line was a test line (its continuation
	// lines count too); lines of a panic still to keep.
	inTestLine bool
	panicLeft  int
	partial    bool // the last output did not end its line
}

type outLine struct {
	text string
	why  bool
}

func (o *Output) limits() (head, tail, why int) {
	head, tail, why = o.HeadMax, o.TailMax, o.WhyMax
	if head <= 0 {
		head = 64 << 10
	}
	if tail <= 0 {
		tail = 32 << 10
	}
	if why <= 0 {
		why = 256 << 10
	}
	return head, tail, why
}

// Add takes one output event's text (usually one line).
func (o *Output) Add(s string) {
	headMax, tailMax, whyMax := o.limits()
	why := o.classify(s)
	if o.tail == nil && o.head.Len()+len(s) <= headMax {
		o.head.WriteString(s)
		return
	}
	o.tail = append(o.tail, outLine{s, why})
	o.tailSize += len(s)
	for o.tailSize > tailMax && o.tailFrom < len(o.tail)-1 {
		l := o.tail[o.tailFrom]
		o.tail[o.tailFrom] = outLine{}
		o.tailFrom++
		o.tailSize -= len(l.text)
		if l.why && o.midBytes+len(l.text) <= whyMax {
			o.flushLeft()
			o.mid = append(o.mid, l.text)
			o.midBytes += len(l.text)
		} else {
			o.left++
		}
	}
	if o.tailFrom > 1024 && o.tailFrom > len(o.tail)/2 {
		o.tail = append([]outLine(nil), o.tail[o.tailFrom:]...)
		o.tailFrom = 0
	}
}

// classify reports whether s says why a test failed, following the
// lines before it.
func (o *Output) classify(s string) bool {
	// a line written in parts: its parts after the first take its class
	cont := o.partial
	o.partial = !strings.HasSuffix(s, "\n")
	if cont {
		return o.inTestLine || o.panicLeft > 0
	}
	switch {
	case strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: "):
		o.panicLeft = panicLines
		o.inTestLine = false
		return true
	case o.panicLeft > 0:
		o.panicLeft--
		return true
	case testLine.MatchString(s):
		o.inTestLine = true
		return true
	case o.inTestLine && strings.HasPrefix(s, "        "):
		return true
	case strings.HasPrefix(strings.TrimLeft(s, " "), "--- FAIL: "):
		o.inTestLine = false
		return true
	}
	o.inTestLine = false
	return false
}

func size(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func (o *Output) flushLeft() {
	if o.left > 0 {
		o.mid = append(o.mid, fmt.Sprintf("[... %d lines left out ...]\n", o.left))
		o.left = 0
	}
}

// String is what to print: the head, the lines that say why with counts
// of the lines left out between them, and the tail.
func (o *Output) String() string {
	headMax, tailMax, _ := o.limits()
	var b strings.Builder
	b.WriteString(o.head.String())
	if len(o.mid) > 0 || o.left > 0 {
		fmt.Fprintf(&b, "[... past %s of output: the test's own lines, panics and --- FAIL lines, then the last %s ...]\n", size(headMax), size(tailMax))
	}
	for _, l := range o.mid {
		b.WriteString(l)
	}
	if o.left > 0 {
		fmt.Fprintf(&b, "[... %d lines left out ...]\n", o.left)
	}
	for _, l := range o.tail[o.tailFrom:] {
		b.WriteString(l.text)
	}
	return b.String()
}
