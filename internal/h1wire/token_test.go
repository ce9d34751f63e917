package h1wire

import (
	"net/textproto"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// countLinesBytewise is CountLines as it was, a byte at a time: the
// reference the word-at-a-time scan must agree with.
func countLinesBytewise(b []byte) (int, HeadFault, byte) {
	lines := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 0x20 && c != 0x7f || c == '\t' {
			continue
		}
		switch c {
		case '\r':
			if i+1 >= len(b) || b[i+1] != '\n' {
				return lines, BareCR, c
			}
			i++
			lines++
		case '\n':
			return lines, BareLF, c
		default:
			return lines, ControlByte, c
		}
	}
	return lines, HeadOK, 0
}

func checkScan(t *testing.T, in string) {
	t.Helper()
	n, f, c := CountLines([]byte(in))
	wn, wf, wc := countLinesBytewise([]byte(in))
	if n != wn || f != wf || c != wc {
		t.Fatalf("CountLines(%q) = %d %d %#x, byte by byte %d %d %#x", in, n, f, c, wn, wf, wc)
	}
	if got, want := ValidFieldValue(in), httpguts.ValidHeaderFieldValue(in); got != want {
		t.Fatalf("ValidFieldValue(%q) = %v, httpguts says %v", in, got, want)
	}
}

// TestScanEveryByteEveryPlace puts each of the 256 byte values at each
// place of a 24-byte line (every offset in a word, and the tail), between
// clean bytes of every top-bit state.
func TestScanEveryByteEveryPlace(t *testing.T) {
	for _, fill := range []byte{'a', 0x80, 0xff, 0x20, 0x7e, 0x21} {
		for c := 0; c < 256; c++ {
			for at := 0; at < 24; at++ {
				b := []byte(strings.Repeat(string(fill), 24))
				b[at] = byte(c)
				checkScan(t, string(b))
				checkScan(t, string(b)+"\r\n")
				checkScan(t, string(b[:at+1]))
			}
		}
	}
	for _, in := range []string{"", "\r", "\n", "\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"a\tb", "\t\t\t\t\t\t\t\t\t", "x\r\ny\rz", "abcdefgh\x7f", "abcdefg\x00", "\x1f\x20"} {
		checkScan(t, in)
	}
}

func FuzzScan(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "a\tb\x7fc", "x\ry\n", "\x80\xff\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) { checkScan(t, in) })
}

func BenchmarkCountLines(b *testing.B) {
	head := []byte("HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sun, 06 Dec 2026 03:00:00 GMT\r\n" +
		"Content-Type: text/plain\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n")
	b.SetBytes(int64(len(head)))
	for b.Loop() {
		CountLines(head)
	}
}

func BenchmarkValidFieldValue(b *testing.B) {
	for b.Loop() {
		ValidFieldValue("Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101")
	}
}

// FuzzFieldName checks FieldName's one pass against the two it replaces:
// a byte loop to the colon with IsTokenByte, then net/textproto's
// canonical form of the name.
func FuzzFieldName(f *testing.F) {
	for _, s := range []string{"Content-Type: a", "content-type:", "X-ABC-def: 1", "a b: c", "x\x00: y", ":v", "noColon", "ÄÖ: x", "x-:", "-a:", "Te:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		wantColon, wantBad := -1, -1
		for i := 0; i < len(line); i++ {
			if line[i] == ':' {
				wantColon = i
				break
			}
			if !IsTokenByte(line[i]) {
				wantBad = i
				break
			}
		}
		name, colon, bad := FieldName(line)
		if colon != wantColon || bad != wantBad {
			t.Fatalf("FieldName(%q): colon %d bad %d, want %d %d", line, colon, bad, wantColon, wantBad)
		}
		if colon >= 0 {
			if want := textproto.CanonicalMIMEHeaderKey(line[:colon]); name != want && colon > 0 {
				t.Fatalf("FieldName(%q) = %q, want %q", line, name, want)
			}
		}
	})
}
