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

// TestFields: a run of fields comes out as WriteField would write them,
// in order, whether the lines fit the free space, fill it on the way or
// are longer than the whole buffer; and bytes written before and after
// the run stay where they were.
func TestFields(t *testing.T) {
	for _, size := range []int{16, 32, 64, 4096} {
		var out, want bytes.Buffer
		bw := bufio.NewWriterSize(&out, size)
		ref := bufio.NewWriterSize(&want, size)
		bw.WriteString("HTTP/1.1 200 OK\r\n")
		ref.WriteString("HTTP/1.1 200 OK\r\n")
		var f Fields
		f.Start(bw)
		for _, kv := range [][2]string{{"A", "b"}, {"Long-Name", strings.Repeat("v", 40)}, {"C", ""}, {"Content-Type", "text/plain"}, {"D", strings.Repeat("w", 9)}} {
			f.Add(kv[0], kv[1])
			WriteField(ref, kv[0], kv[1])
		}
		f.Done()
		bw.WriteString("\r\n")
		ref.WriteString("\r\n")
		bw.Flush()
		ref.Flush()
		if out.String() != want.String() {
			t.Fatalf("buffer of %d: got %q, want %q", size, out.String(), want.String())
		}
	}
}
