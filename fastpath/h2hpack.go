package fastpath

import (
	"strings"

	"golang.org/x/net/http2/hpack"

	"github.com/apigate/gateway/internal/h1wire"
)

// The HTTP/2 engine's HPACK encoder (RFC 7541) for the header blocks it
// sends. x/net's hpack.Encoder indexes every field and searches its
// dynamic table through two maps for each one (about 4,400 instructions a
// proxied request, callgrind, bench/callgrind/h2); this one knows the
// response fields' names in advance (h2FieldName: their lower-case form
// and static-table index come from a switch), and keeps a small cache of
// the values it indexed: a field whose name has a slot (server, via,
// content-type, date, ...) is inserted into the dynamic table once and
// then sent as its index, as long as the value is the one last inserted
// and the entry has not been evicted; every other field is a literal
// without indexing, its name by static index where the static table has
// it. Strings are Huffman-coded when that is shorter, as x/net does.
//
// The dynamic table is not searched: the encoder keeps the sizes of the
// entries it inserted (a ring, oldest first) to evict exactly as the
// peer's decoder does, and each slot knows the number of its entry.

const (
	h2EncTableMax   = 4096 // the dynamic table's size at most (the default; SETTINGS may lower it)
	h2EncMaxEntries = h2EncTableMax / 32
	h2SlotValueMax  = 128 // longer values are not indexed
)

// the fields that have a slot: values that repeat from response to
// response on a connection
const (
	slotServer = iota
	slotVia
	slotContentType
	slotDate
	slotAltSvc
	slotVary
	slotCacheControl
	slotContentEncoding
	slotAccessControlAllowOrigin
	slotStrictTransportSecurity
	slotXContentTypeOptions
	slotXFrameOptions
	slotReferrerPolicy
	slotAcceptRanges
	h2Slots
)

// h2Name is a field name as the encoder takes it: lower case, with the
// static table's index of the name (0: not there) and its slot (-1: none).
type h2Name struct {
	lower  string
	static uint8
	slot   int8
}

type h2Slot struct {
	seq   uint64 // the number of the entry inserted for the slot (0: none)
	value []byte // its value (a copy: the handler's string may be reused)
}

// h2Encoder encodes header blocks into buf; the connection's, used under
// its write lock (the peer's decoder sees the blocks in the order they
// are encoded).
type h2Encoder struct {
	buf []byte

	maxSize  uint32 // the dynamic table's size limit
	size     uint32 // the entries' sizes added
	ents     [h2EncMaxEntries]uint32
	head, n  int    // ents[head] is the oldest of n entries
	inserted uint64 // entries ever inserted: the newest's number
	update   bool   // a size update is due at the next block's start
	minSize  uint32 // the smallest limit set since the last block
	slots    [h2Slots]h2Slot
}

func (e *h2Encoder) init() {
	e.maxSize = h2EncTableMax
	e.minSize = h2EncTableMax
}

// setMaxSize is the peer's SETTINGS_HEADER_TABLE_SIZE (as x/net's
// SetMaxDynamicTableSize: at most 4096; the next block starts with the
// size updates, the smallest limit set first when it was lower).
func (e *h2Encoder) setMaxSize(v uint32) {
	v = min(v, h2EncTableMax)
	e.minSize = min(e.minSize, v)
	e.update = true
	e.maxSize = v
	e.evict(0)
}

// evict drops the oldest entries until an entry of size more fits.
func (e *h2Encoder) evict(more uint32) {
	for e.n > 0 && e.size+more > e.maxSize {
		e.size -= e.ents[e.head]
		e.head = (e.head + 1) % h2EncMaxEntries
		e.n--
	}
}

// begin starts a header block in buf.
func (e *h2Encoder) begin() {
	e.buf = e.buf[:0]
	if e.update {
		e.update = false
		if e.minSize < e.maxSize {
			e.buf = appendH2Int(e.buf, 0x20, 5, uint64(e.minSize))
		}
		e.buf = appendH2Int(e.buf, 0x20, 5, uint64(e.maxSize))
		e.minSize = h2EncTableMax
	}
}

// status encodes :status.
func (e *h2Encoder) status(code int) {
	var i byte
	switch code {
	case 200:
		i = 8
	case 204:
		i = 9
	case 206:
		i = 10
	case 304:
		i = 11
	case 400:
		i = 12
	case 404:
		i = 13
	case 500:
		i = 14
	default:
		e.buf = append(e.buf, 8) // literal without indexing, name :status
		e.buf = appendH2String(e.buf, statusString(code))
		return
	}
	e.buf = append(e.buf, 0x80|i)
}

// field encodes one field (n.lower: a valid lower-case name), unless its
// value is not a valid field value (Go's encodeHeaders leaves those
// out). A value equal to its slot's was checked when it was inserted.
func (e *h2Encoder) field(n h2Name, v string) {
	if n.slot >= 0 && e.maxSize > 0 {
		s := &e.slots[n.slot]
		if s.seq != 0 && s.seq+uint64(e.n) > e.inserted && string(s.value) == v {
			e.buf = appendH2Int(e.buf, 0x80, 7, 62+e.inserted-s.seq)
			return
		}
	}
	if !h1wire.ValidFieldValue(v) {
		return
	}
	if n.slot >= 0 && e.maxSize > 0 {
		s := &e.slots[n.slot]
		if size := uint32(len(n.lower) + len(v) + 32); len(v) <= h2SlotValueMax && size <= e.maxSize {
			e.evict(size)
			e.ents[(e.head+e.n)%h2EncMaxEntries] = size
			e.n++
			e.size += size
			e.inserted++
			s.seq = e.inserted
			s.value = append(s.value[:0], v...)
			e.literal(0x40, 6, n, v) // with incremental indexing
			return
		}
	}
	e.literal(0, 4, n, v) // without indexing
}

func (e *h2Encoder) literal(first byte, prefix uint8, n h2Name, v string) {
	if n.static != 0 {
		e.buf = appendH2Int(e.buf, first, prefix, uint64(n.static))
	} else {
		e.buf = append(e.buf, first)
		e.buf = appendH2String(e.buf, n.lower)
	}
	e.buf = appendH2String(e.buf, v)
}

// appendH2Int appends i with an n-bit prefix, the first byte's other
// bits first's (RFC 7541 5.1).
func appendH2Int(dst []byte, first byte, n uint8, i uint64) []byte {
	k := uint64(1)<<n - 1
	if i < k {
		return append(dst, first|byte(i))
	}
	dst = append(dst, first|byte(k))
	i -= k
	for ; i >= 128; i >>= 7 {
		dst = append(dst, byte(0x80|i&0x7f))
	}
	return append(dst, byte(i))
}

// appendH2String appends a string literal, Huffman-coded when shorter
// (RFC 7541 5.2).
func appendH2String(dst []byte, s string) []byte {
	if hl := hpack.HuffmanEncodeLength(s); hl < uint64(len(s)) {
		dst = appendH2Int(dst, 0x80, 7, hl)
		return hpack.AppendHuffmanString(dst, s)
	}
	dst = appendH2Int(dst, 0, 7, uint64(len(s)))
	return append(dst, s...)
}

// h2FieldName is the encoder's form of a response header's (canonical)
// key; ok is false for a key that is not ASCII or not a valid field name
// once lower-cased (Go's encodeHeaders leaves those out).
func h2FieldName(k string) (n h2Name, ok bool) {
	switch k {
	case "Server":
		return h2Name{"server", 54, slotServer}, true
	case "Via":
		return h2Name{"via", 60, slotVia}, true
	case "Content-Type":
		return h2Name{"content-type", 31, slotContentType}, true
	case "Content-Length":
		return h2Name{"content-length", 28, -1}, true
	case "Date":
		return h2Name{"date", 33, slotDate}, true
	case "Alt-Svc":
		return h2Name{"alt-svc", 0, slotAltSvc}, true
	case "Vary":
		return h2Name{"vary", 59, slotVary}, true
	case "Cache-Control":
		return h2Name{"cache-control", 24, slotCacheControl}, true
	case "Content-Encoding":
		return h2Name{"content-encoding", 26, slotContentEncoding}, true
	case "Access-Control-Allow-Origin":
		return h2Name{"access-control-allow-origin", 20, slotAccessControlAllowOrigin}, true
	case "Strict-Transport-Security":
		return h2Name{"strict-transport-security", 56, slotStrictTransportSecurity}, true
	case "X-Content-Type-Options":
		return h2Name{"x-content-type-options", 0, slotXContentTypeOptions}, true
	case "X-Frame-Options":
		return h2Name{"x-frame-options", 0, slotXFrameOptions}, true
	case "Referrer-Policy":
		return h2Name{"referrer-policy", 0, slotReferrerPolicy}, true
	case "Accept-Ranges":
		return h2Name{"accept-ranges", 18, slotAcceptRanges}, true
	case "Age":
		return h2Name{"age", 21, -1}, true
	case "Allow":
		return h2Name{"allow", 22, -1}, true
	case "Content-Disposition":
		return h2Name{"content-disposition", 25, -1}, true
	case "Content-Language":
		return h2Name{"content-language", 27, -1}, true
	case "Content-Location":
		return h2Name{"content-location", 29, -1}, true
	case "Content-Range":
		return h2Name{"content-range", 30, -1}, true
	case "Etag":
		return h2Name{"etag", 34, -1}, true
	case "Expires":
		return h2Name{"expires", 36, -1}, true
	case "Last-Modified":
		return h2Name{"last-modified", 44, -1}, true
	case "Link":
		return h2Name{"link", 45, -1}, true
	case "Location":
		return h2Name{"location", 46, -1}, true
	case "Retry-After":
		return h2Name{"retry-after", 53, -1}, true
	case "Set-Cookie":
		return h2Name{"set-cookie", 55, -1}, true
	case "Www-Authenticate":
		return h2Name{"www-authenticate", 61, -1}, true
	case "Transfer-Encoding":
		return h2Name{"transfer-encoding", 57, -1}, true
	case "Trailer":
		return h2Name{"trailer", 0, -1}, true
	case "Content-Security-Policy":
		return h2Name{"content-security-policy", 0, -1}, true
	case "X-Request-Id":
		return h2Name{"x-request-id", 0, -1}, true
	case "Ratelimit":
		return h2Name{"ratelimit", 0, -1}, true
	case "Ratelimit-Policy":
		return h2Name{"ratelimit-policy", 0, -1}, true
	}
	for i := 0; i < len(k); i++ {
		if k[i] >= 0x80 {
			return h2Name{}, false
		}
	}
	lk := strings.ToLower(k)
	if !validWireName(lk) {
		return h2Name{}, false
	}
	return h2Name{lk, h2StaticName(lk), -1}, true
}

// h2StaticName is the static table's index of a lower-case name (0:
// none), for the names h2FieldName's switch does not list as they came.
func h2StaticName(lk string) uint8 {
	switch lk {
	case "accept-charset":
		return 15
	case "accept-encoding":
		return 16
	case "accept-language":
		return 17
	case "accept-ranges":
		return 18
	case "accept":
		return 19
	case "access-control-allow-origin":
		return 20
	case "age":
		return 21
	case "allow":
		return 22
	case "authorization":
		return 23
	case "cache-control":
		return 24
	case "content-disposition":
		return 25
	case "content-encoding":
		return 26
	case "content-language":
		return 27
	case "content-length":
		return 28
	case "content-location":
		return 29
	case "content-range":
		return 30
	case "content-type":
		return 31
	case "cookie":
		return 32
	case "date":
		return 33
	case "etag":
		return 34
	case "expect":
		return 35
	case "expires":
		return 36
	case "from":
		return 37
	case "host":
		return 38
	case "if-match":
		return 39
	case "if-modified-since":
		return 40
	case "if-none-match":
		return 41
	case "if-range":
		return 42
	case "if-unmodified-since":
		return 43
	case "last-modified":
		return 44
	case "link":
		return 45
	case "location":
		return 46
	case "max-forwards":
		return 47
	case "proxy-authenticate":
		return 48
	case "proxy-authorization":
		return 49
	case "range":
		return 50
	case "referer":
		return 51
	case "refresh":
		return 52
	case "retry-after":
		return 53
	case "server":
		return 54
	case "set-cookie":
		return 55
	case "strict-transport-security":
		return 56
	case "transfer-encoding":
		return 57
	case "user-agent":
		return 58
	case "vary":
		return 59
	case "via":
		return 60
	case "www-authenticate":
		return 61
	}
	return 0
}

// the names the response writer adds itself
var (
	h2NameContentType   = h2Name{"content-type", 31, slotContentType}
	h2NameContentLength = h2Name{"content-length", 28, -1}
	h2NameDate          = h2Name{"date", 33, slotDate}
)

const h2StaticTransferEncoding = 57
