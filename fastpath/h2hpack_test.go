package fastpath

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// TestH2EncoderDecodes feeds x/net's decoder, as a client holds it, the
// blocks h2Encoder makes: random response fields (names with a slot,
// with a static index, of neither; values that repeat, change and are
// too long to index, invalid), with the peer's table size changing
// between blocks (to 0, below the entries' sizes, above the limit):
// every block must decode to the fields given but the invalid ones, and
// a repeated field must come back as an index (one byte).
func TestH2EncoderDecodes(t *testing.T) {
	keys := []string{"Server", "Via", "Content-Type", "Date", "Alt-Svc", "Vary", "Cache-Control",
		"Content-Encoding", "Content-Length", "Etag", "Set-Cookie", "X-Custom-Field", "X-Request-Id",
		"Accept-Ranges", "content-type", "X-Frame-Options", "Ratelimit-Policy"}
	values := []string{"", "Caddy", "1.1 Caddy", "application/json", "gzip", "0", "74",
		"Mon, 07 Dec 2026 01:02:03 GMT", strings.Repeat("v", 129), strings.Repeat("w", 40),
		"bad\x00value", "bad\nline"} // (invalid values are left out)
	sizes := []uint32{0, 40, 100, 300, 4096, 8192}
	rng := rand.New(rand.NewPCG(43, 2))
	var enc h2Encoder
	enc.init()
	dec := hpack.NewDecoder(4096, nil)
	for block := 0; block < 20000; block++ {
		if rng.IntN(50) == 0 {
			// One or two SETTINGS before the next block; the decoder
			// applies the size updates the block starts with. (With
			// two, the first is 0: x/net's decoder refuses a second
			// update while the first left entries in the table, which
			// RFC 7541 4.2 allows and x/net's encoder sends too.)
			if rng.IntN(2) == 0 {
				enc.setMaxSize(0)
			}
			enc.setMaxSize(sizes[rng.IntN(len(sizes))])
		}
		var want []hpack.HeaderField
		enc.begin()
		code := []int{200, 204, 404, 502, 100, 301}[rng.IntN(6)]
		enc.status(code)
		want = append(want, hpack.HeaderField{Name: ":status", Value: strconv.Itoa(code)})
		for range rng.IntN(8) {
			k, v := keys[rng.IntN(len(keys))], values[rng.IntN(len(values))]
			if rng.IntN(4) == 0 {
				v += strconv.Itoa(rng.IntN(1000)) // a new value
			}
			n, ok := h2FieldName(k)
			if !ok {
				t.Fatalf("h2FieldName(%q) not ok", k)
			}
			enc.field(n, v)
			if strings.HasPrefix(v, "bad") {
				continue
			}
			want = append(want, hpack.HeaderField{Name: strings.ToLower(k), Value: v})
		}
		got, err := dec.DecodeFull(enc.buf)
		if err != nil {
			t.Fatalf("block %d: %v (%x)", block, err, enc.buf)
		}
		if len(got) != len(want) {
			t.Fatalf("block %d: %d fields, want %d: %v", block, len(got), len(want), got)
		}
		for i := range got {
			if got[i].Name != want[i].Name || got[i].Value != want[i].Value {
				t.Fatalf("block %d field %d: %q: %q, want %q: %q", block, i, got[i].Name, got[i].Value, want[i].Name, want[i].Value)
			}
		}
	}

	// a field sent again is its index
	enc = h2Encoder{}
	enc.init()
	server, _ := h2FieldName("Server")
	enc.begin()
	enc.field(server, "Caddy")
	enc.begin()
	enc.field(server, "Caddy")
	if len(enc.buf) != 1 || enc.buf[0] != 0x80|62 {
		t.Errorf("server: Caddy again: % x, want be", enc.buf)
	}

	// the table's limit lowered and raised between two blocks: the next
	// starts with both (RFC 7541 4.2), and the entry is gone
	enc.setMaxSize(0)
	enc.setMaxSize(4096)
	enc.begin()
	enc.field(server, "Caddy")
	if want := "\x20\x3f\xe1\x1f\x76"; !strings.HasPrefix(string(enc.buf), want) {
		t.Errorf("after SETTINGS 0 and 4096: % x, want % x and the literal", enc.buf, want)
	}
}

func TestH2FieldName(t *testing.T) {
	for _, tc := range []struct {
		key, lower string
		static     uint8
		ok         bool
	}{
		{"Server", "server", 54, true},
		{"User-Agent", "user-agent", 58, true},
		{"content-type", "content-type", 31, true},
		{"X-Custom", "x-custom", 0, true},
		{"Bad Name", "", 0, false},
		{"Ünicode", "", 0, false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			n, ok := h2FieldName(tc.key)
			if ok != tc.ok || ok && (n.lower != tc.lower || n.static != tc.static) {
				t.Errorf("h2FieldName(%q) = %+v, %v; want %q, %d, %v", tc.key, n, ok, tc.lower, tc.static, tc.ok)
			}
		})
	}
}
