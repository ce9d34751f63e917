package h1wire

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

// TestWriteField: the same bytes whether the field fits in the buffer's
// free space or not (a 16-byte buffer: the long field is written through).
func TestWriteField(t *testing.T) {
	var out bytes.Buffer
	bw := bufio.NewWriterSize(&out, 16)
	WriteField(bw, "A", "b")
	WriteField(bw, "Long-Name", strings.Repeat("v", 40))
	WriteField(bw, "C", "")
	bw.Flush()
	want := "A: b\r\nLong-Name: " + strings.Repeat("v", 40) + "\r\nC: \r\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
}
