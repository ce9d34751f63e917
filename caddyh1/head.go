package caddyh1

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/apigate/gateway/internal/h1wire"
)

// A response head (status line and header fields) is parsed strictly, as
// RFC 9112 asks of an intermediary: anything a lenient parser could read in
// two ways is refused rather than forwarded. Refused are bare LF and bare CR,
// obs-fold (a line starting with whitespace), whitespace between a field name
// and its colon, bytes that are not allowed in a field name or value, a
// Content-Length together with Transfer-Encoding, differing Content-Length
// values, and any transfer coding but a single "chunked".

// errHead is wrapped by every error about a malformed response head.
var errHead = errors.New("malformed upstream response head")

func headErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errHead}, args...)...)
}

// head is a parsed response head.
type head struct {
	status     int
	statusText string // "200 OK", as http.Response.Status
	major      int
	minor      int
	header     http.Header
	trailer    http.Header // announced trailer names, with nil values

	// framing
	contentLength int64 // -1: none given
	chunked       bool
	close         bool // the upstream will close the connection after this response
}

// findHeadEnd returns the length of the head at the start of b (through its
// final CRLF CRLF), or -1 when b does not hold a whole head yet. from is
// where to resume the search (0, or where the previous search stopped).
func findHeadEnd(b []byte, from int) int {
	if from > 3 {
		from -= 3
	} else {
		from = 0
	}
	i := bytes.Index(b[from:], crlfcrlf)
	if i < 0 {
		return -1
	}
	return from + i + 4
}

var crlfcrlf = []byte("\r\n\r\n")

// headScan finds the end of a response head while its bytes arrive, and
// checks each byte on the way (CountLines' check) and records where each
// line ends, in one pass: parseHead then reads the lines from ends instead
// of the head being searched for its end, checked, and searched again
// line by line (three passes over the same bytes: bytes.Index, CountLines
// and a CR search a line were ~1,000 instructions of a proxied request,
// callgrind). A fault is reported as CountLines reports it, once the head
// is whole (findHeadEnd finds its end then), as before.
type headScan struct {
	pos       int   // where scanning resumes in the buffered bytes
	lineStart int   // where the line being scanned begins
	ends      []int // each whole line's CR
	fault     h1wire.HeadFault
	faultByte byte
}

// reset readies the scan for the next head.
func (hs *headScan) reset() {
	hs.pos, hs.lineStart, hs.ends, hs.fault, hs.faultByte = 0, 0, hs.ends[:0], h1wire.HeadOK, 0
}

// scan goes on over b (the buffered bytes: the head so far, from its
// first byte) and returns the head's length, through the CRLF of its empty
// last line, or -1 when b does not hold the whole head yet.
func (hs *headScan) scan(b []byte) int {
	if hs.fault != h1wire.HeadOK {
		end := findHeadEnd(b, hs.pos)
		hs.pos = len(b)
		return end
	}
	i := hs.pos
	for {
		i = h1wire.SkipClean(b, i)
		if i >= len(b) {
			hs.pos = len(b)
			return -1
		}
		switch c := b[i]; c {
		case '\t':
			i++
			continue
		case '\r':
			if i+1 >= len(b) {
				hs.pos = i // (its LF is still to come)
				return -1
			}
			if b[i+1] == '\n' {
				hs.ends = append(hs.ends, i)
				if i == hs.lineStart && len(hs.ends) > 1 {
					return i + 2 // the empty line after the status line and fields
				}
				i += 2
				hs.lineStart = i
				continue
			}
			hs.fault = h1wire.BareCR
		case '\n':
			hs.fault = h1wire.BareLF
		default:
			hs.fault = h1wire.ControlByte
		}
		// a fault: the head's end is looked for as before, and the fault
		// reported once it is found
		hs.faultByte = b[i]
		end := findHeadEnd(b, i)
		hs.pos = len(b)
		return end
	}
}

// parseHead parses one complete response head, b, which ends with CRLF CRLF
// (see findHeadEnd). Field names and values are substrings of one string
// copied from b, so parsing allocates a few times whatever the head's size;
// with ru, once (the header map and its values are ru's).
//
// hs, when not nil, is the scan that found b's end (headScan): its check
// and line ends stand for CountLines' and the search for each line's end.
func parseHead(b []byte, h *head, ru *Reuse, hs *headScan) error {
	*h = head{contentLength: -1}
	// Check every byte once: only CRLF pairs may hold a CR or an LF, and the
	// only other control byte allowed anywhere is HTAB.
	var lines int
	var fault h1wire.HeadFault
	var c byte
	if hs != nil {
		lines, fault, c = len(hs.ends), hs.fault, hs.faultByte
	} else {
		lines, fault, c = h1wire.CountLines(b)
	}
	switch fault {
	case h1wire.BareCR:
		return headErr("bare CR")
	case h1wire.BareLF:
		return headErr("bare LF")
	case h1wire.ControlByte:
		return headErr("control byte %#x", c)
	}
	s := string(b[:len(b)-2]) // the lines, each ending in CRLF; the empty last line dropped

	// status-line = HTTP-version SP status-code SP [ reason-phrase ]
	eol := lineEnd(s, 0, hs, 0)
	line := s[:eol]
	if len(line) < 12 || line[:7] != "HTTP/1." || line[8] != ' ' {
		return headErr("bad status line %q", truncate(line))
	}
	if line[7] < '0' || line[7] > '9' {
		return headErr("bad HTTP version %q", truncate(line[:8]))
	}
	h.major, h.minor = 1, int(line[7]-'0')
	code := line[9:12]
	if code[0] < '1' || code[0] > '5' || !isDigit(code[1]) || !isDigit(code[2]) {
		return headErr("bad status code %q", code)
	}
	h.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	reason := ""
	if len(line) > 12 {
		if line[12] != ' ' {
			return headErr("bad status line %q", truncate(line))
		}
		reason = line[13:]
	}
	h.statusText = statusText(h.status, line[9:], reason)

	// field-line = field-name ":" OWS field-value OWS
	fields := lines - 2 // minus the status line and the empty last line
	var vals []string
	switch {
	case ru != nil:
		if ru.hdr == nil {
			ru.hdr = make(http.Header, max(fields, 8))
		}
		clear(ru.hdr)
		if cap(ru.vals) < fields {
			ru.vals = make([]string, fields+8)
		}
		clear(ru.vals)
		h.header, vals = ru.hdr, ru.vals[:max(fields, 0)]
	case fields > 0:
		h.header = make(http.Header, fields)
		vals = make([]string, fields)
	}
	var clSeen, teSeen bool
	var teValue string
	// the names met so far, for the first few: a name not among them is
	// new, and goes into the map without a lookup first (a head's fields
	// are mostly distinct; the lookup was 1.5% of a proxied request's
	// instructions, callgrind)
	var local [maxNames]string
	seen := local[:]
	lazy := false // the map is left empty: the fields are in ru's list alone
	if ru != nil {
		seen = ru.names[:]
		ru.nnames = -1 // (until the head is parsed whole)
		ru.pending = false
		lazy = ru.LazyHeader
	}
	connSeen := false
	nseen := 0
	pos := eol + 2
	for n := 1; pos < len(s); n++ {
		eol = lineEnd(s, pos, hs, n)
		line = s[pos:eol]
		pos = eol + 2
		if line == "" {
			return headErr("empty line inside the head")
		}
		if line[0] == ' ' || line[0] == '\t' {
			return headErr("obs-fold (a line continued with whitespace)")
		}
		// the name the previous head of this connection had at this
		// place (ru.names, not yet overwritten here: this head's names
		// go to indices up to n-1), checked then: the same bytes before
		// the colon are the same name, without FieldName's scan (about
		// 190 instructions a name; an upstream sends the same names in
		// the same order response after response)
		key, colon, bad := "", 0, -1
		if ru != nil && n-1 < len(ru.names) {
			if k := ru.names[n-1]; k != "" && len(line) > len(k) && line[len(k)] == ':' && line[:len(k)] == k {
				key, colon = k, len(k)
			}
		}
		if key == "" {
			key, colon, bad = h1wire.FieldName(line)
		}
		if bad >= 0 {
			return headErr("invalid byte %#x in field name %q", line[bad], truncate(line))
		}
		if colon <= 0 {
			return headErr("field line without a name and colon: %q", truncate(line))
		}
		value := h1wire.TrimOWS(line[colon+1:])

		switch key {
		case "Content-Length":
			n, err := parseContentLength(value)
			if err != nil {
				return err
			}
			if clSeen && n != h.contentLength {
				return headErr("differing Content-Length values")
			}
			clSeen, h.contentLength = true, n
		case "Transfer-Encoding":
			if teSeen {
				return headErr("more than one Transfer-Encoding field")
			}
			teSeen, teValue = true, value
		case "Connection":
			connSeen = true
			if h1wire.HasToken(value, "close") {
				h.close = true
			}
			if h.minor == 0 && !h1wire.HasToken(value, "keep-alive") {
				h.close = true
			}
		case "Trailer":
			if err := h.announceTrailers(value); err != nil {
				return err
			}
			continue // not forwarded as a field; http.Response.Trailer holds the names
		}
		dup := false
		if nseen < len(seen) {
			for at, k := range seen[:nseen] {
				if k == key {
					dup = true
					if ru != nil { // (the map's slice, kept beside the name: no lookup)
						ru.values[at] = append(ru.values[at], value)
						if !lazy {
							h.header[key] = ru.values[at]
						}
					} else {
						h.header[key] = append(h.header[key], value)
					}
					break
				}
			}
			if dup {
				continue
			}
			seen[nseen] = key
			nseen++
		} else {
			if lazy { // more names than the list holds: the map, from here on
				for i, k := range seen[:nseen] {
					h.header[k] = ru.values[i]
				}
				lazy = false
			}
			_, dup = h.header[key]
			if !dup {
				nseen = len(seen) + 1 // more names than seen holds
			}
		}
		if dup {
			h.header[key] = append(h.header[key], value)
			continue
		}
		vals[0] = value
		if !lazy {
			h.header[key] = vals[:1:1]
		}
		if ru != nil && nseen <= len(seen) {
			ru.values[nseen-1] = vals[:1:1]
		}
		vals = vals[1:]
	}

	if ru != nil && nseen <= len(seen) {
		ru.nnames = nseen
		ru.pending = lazy
	}
	if h.minor == 0 && !connSeen {
		h.close = true // HTTP/1.0 without keep-alive
	}
	if teSeen {
		if clSeen {
			return headErr("both Content-Length and Transfer-Encoding")
		}
		if h.minor == 0 {
			return headErr("Transfer-Encoding in an HTTP/1.0 response")
		}
		if !h1wire.EqualFoldASCII(teValue, "chunked") {
			return headErr("unsupported Transfer-Encoding %q", truncate(teValue))
		}
		h.chunked = true
		h.contentLength = -1
		delete(h.header, "Transfer-Encoding") // as net/http: the framing is the transport's
		if ru != nil && ru.nnames >= 0 {
			for i, k := range ru.names[:ru.nnames] {
				if k == "Transfer-Encoding" {
					ru.values[i] = nil
				}
			}
		}
	}
	return nil
}

// announceTrailers records the names a Trailer field announces.
func (h *head) announceTrailers(value string) error {
	for value != "" {
		var name string
		name, value = h1wire.NextListItem(value)
		if name == "" {
			continue
		}
		for i := 0; i < len(name); i++ {
			if !h1wire.IsTokenByte(name[i]) {
				return headErr("invalid trailer name %q", truncate(name))
			}
		}
		key := h1wire.CanonicalKey(name)
		switch key {
		case "Transfer-Encoding", "Trailer", "Content-Length":
			return headErr("trailer name %q is not allowed", key)
		}
		if h.trailer == nil {
			h.trailer = make(http.Header)
		}
		h.trailer[key] = nil
	}
	return nil
}

// bodyAllowed reports whether a response to method with this status has a
// body (RFC 9112 section 6.3).
func (h *head) bodyAllowed(method string) bool {
	if method == http.MethodHead {
		return false
	}
	return h.status >= 200 && h.status != http.StatusNoContent && h.status != http.StatusNotModified
}

// lineEnd is where line n of a head, s, which begins at pos, ends (its
// CR): as hs recorded it, or searched for.
func lineEnd(s string, pos int, hs *headScan, n int) int {
	if hs != nil {
		return hs.ends[n]
	}
	return indexCRLF(s, pos)
}

func indexCRLF(s string, from int) int {
	// (IndexByte's vector scan: a byte loop here was 2.8% of a proxied
	// request's instructions, callgrind)
	if i := strings.IndexByte(s[from:], '\r'); i >= 0 {
		return from + i // parseHead checked that every CR is followed by LF
	}
	return len(s)
}

func parseContentLength(v string) (int64, error) {
	// A list of identical values ("42, 42") is one value (RFC 9110 8.6).
	var n int64 = -1
	for v != "" {
		var item string
		item, v = h1wire.NextListItem(v)
		m, ok := h1wire.ParseDigits(item)
		if !ok {
			return 0, headErr("bad Content-Length %q", truncate(item))
		}
		if n >= 0 && m != n {
			return 0, headErr("differing Content-Length values")
		}
		n = m
	}
	if n < 0 {
		return 0, headErr("empty Content-Length")
	}
	return n, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// statusText returns http.Response.Status ("200 OK") without allocating
// when the reason phrase is the standard one: codeAndReason is the status
// line from the code on.
func statusText(code int, codeAndReason, reason string) string {
	if std := standardStatus[code]; std != "" && std[4:] == reason {
		return std
	}
	return codeAndReason
}

var standardStatus = func() (s [600]string) {
	for code := 100; code < 600; code++ {
		if t := http.StatusText(code); t != "" {
			s[code] = strconv.Itoa(code) + " " + t
		}
	}
	return s
}()

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
