package main

import (
	"fmt"
	"regexp"
	"strings"
)

// Sizes of what a testOutput keeps of one test's output.
const (
	headMax = 64 << 10  // the beginning, whole
	tailMax = 32 << 10  // the end, whole
	whyMax  = 256 << 10 // the lines that say why, from between the two
	// panicLines is how many lines after "panic: " (or "fatal error: ")
	// count as saying why: the panicking goroutine's stack.
	panicLines = 100
)

// testLine is a line the testing package writes for t.Log, t.Error and
// t.Fatal ("    file_test.go:12: message"); the lines after it indented
// by eight spaces or more continue its message.
var testLine = regexp.MustCompile(`^ +[\w.-]+\.go:\d+: `)

// testOutput is what summarize prints of one test's (or package's)
// output. A failing test's output can be megabytes of logs (Caddy's and
// the gateway processes'): all of it up to headMax, then only the lines
// that say why it failed (its own t.Log/t.Error/t.Fatal lines, `--- FAIL`
// lines, a panic and its stack), with a count of the lines left out, and
// the last tailMax bytes whole. So the reason is in the CI log however
// long the output, and the log stays readable.
type testOutput struct {
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

// add takes one output event's text (usually one line).
func (o *testOutput) add(s string) {
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
func (o *testOutput) classify(s string) bool {
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

func (o *testOutput) flushLeft() {
	if o.left > 0 {
		o.mid = append(o.mid, fmt.Sprintf("[... %d lines left out ...]\n", o.left))
		o.left = 0
	}
}

func (o *testOutput) String() string {
	var b strings.Builder
	b.WriteString(o.head.String())
	if len(o.mid) > 0 || o.left > 0 {
		fmt.Fprintf(&b, "[... past %d KiB of output: the test's own lines, panics and --- FAIL lines, then the last %d KiB ...]\n", headMax>>10, tailMax>>10)
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
