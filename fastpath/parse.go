package fastpath

import (
	"bytes"
	"net/url"
	"strings"

	"github.com/apigate/gateway/internal/h1wire"

	"golang.org/x/net/http/httpguts"
)

// The request head is parsed strictly (RFC 9112): anything a lenient
// parser could read in two ways is refused with 400 and a closed
// connection, never passed on. Refused, where Go's net/http server (and so
// Caddy's) accepts: bare LF and bare CR line ends, obs-fold, a request with
// both Content-Length and Transfer-Encoding, repeated Content-Length fields
// (even equal ones), Transfer-Encoding on an HTTP/1.0 request. Refused by
// both, with net/http's answer: malformed request lines, field names that
// are not tokens, control bytes in values, a missing, repeated or malformed
// Host, codings other than "chunked" (501), oversized heads (431).
//
// A well-formed request whose protocol changes (an upgrade, CONNECT),
// that announces trailers or has another HTTP version is not refused: its
// connection is handed to Caddy's server with the bytes already read, and
// Caddy answers it exactly as without the fast path. An absolute-form or
// asterisk target and an ACME HTTP challenge are served through Caddy's
// server handler on the fast path's connection (delegate); an Expect other
// than 100-continue gets net/http's 417.

// field is one header field line: its canonical name and its value.
type field struct {
	name, value string
}

// reqHead is one parsed request head. Its strings are substrings of one
// copy of the head's bytes.
type reqHead struct {
	method   string
	target   string // the request-target as sent
	proto    string // "HTTP/1.1" or "HTTP/1.0"
	minor    int
	path     string // decoded path (net/http's URL.Path)
	rawPath  string // URL.RawPath: set only when the escaping is not the default one
	rawQuery string

	fields []field // in the order received, Host included

	host          string
	contentLength int64 // -1: none (or chunked)
	chunked       bool
	close         bool // the client asked to close (or HTTP/1.0 without keep-alive)
	keepAlive10   bool // HTTP/1.0 with "Connection: keep-alive"
	expect100     bool // Expect: 100-continue
	pragmaNoCache bool // net/http adds "Cache-Control: no-cache" for it
	// reworked: a field reverse_proxy changes on the way upstream (a
	// hop-by-hop one, Via, X-Forwarded-*, Pragma), so the proxy cannot
	// send the fields as they came with its own added (proxyState.plain)
	reworked bool

	// handoff, when set, names why Caddy's server takes this connection
	// from this request on (the request is well-formed): the protocol
	// changes (an upgrade, CONNECT), or the request announces trailers, or
	// it has another HTTP version.
	handoff string
	// delegate, when set, names why this request is served by Caddy's
	// server handler on the fast path's connection (an absolute-form or
	// asterisk target, an ACME HTTP challenge).
	delegate string
	// expectFail: an Expect other than 100-continue, which net/http
	// answers with 417 before any handler runs.
	expectFail bool
	// h2: the head of an HTTP/2 stream (h2.go), made from its header
	// block: proto is "HTTP/2.0", the fields keep Host as Go's HTTP/2
	// server keeps it
	h2 bool
}

// isH2Preface says the head is the HTTP/2 client preface's first part
// ("PRI * HTTP/2.0"): h2c with prior knowledge.
func (h *reqHead) isH2Preface() bool {
	return h.method == "PRI" && h.target == "*" && h.proto == "HTTP/2.0" && len(h.fields) == 0
}

// protoVersion is the request's ProtoMajor and ProtoMinor.
func (h *reqHead) protoVersion() (int, int) {
	if h.h2 {
		return 2, 0
	}
	return 1, h.minor
}

// badRequest is a head the plan refuses, with net/http's status: 400,
// 501 for a transfer coding it does not support, 431 for an oversized
// head. It is answered as the fast path's problem (conn.refuse).
type badRequest struct {
	status int    // 400, 431 or 501
	public string // the text net/http adds to the status, if any
	reason string // for the debug log
}

func (e *badRequest) Error() string { return e.reason }

// detail is the refusal's detail: net/http's text where it names the
// error (a missing or malformed Host), else what the fast path found.
func (e *badRequest) detail() string {
	if e.public != "" {
		return e.public
	}
	return e.reason
}

// instance is a refused request's instance (deny.Instance): the path of
// its origin-form target as sent, without the query; "" when the request
// line did not give one, or gave one with bytes a target may not hold.
func (h *reqHead) instance() string {
	path, _, _ := strings.Cut(h.target, "?")
	if path == "" || path[0] != '/' {
		return ""
	}
	for i := 0; i < len(path); i++ {
		if !targetByte[path[i]] {
			return ""
		}
	}
	return path
}

func refuse(reason string) *badRequest { return &badRequest{status: 400, reason: reason} }

func refusePublic(text string) *badRequest {
	return &badRequest{status: 400, public: text, reason: text}
}

var (
	errUnsupportedTE = &badRequest{status: 501, reason: "unsupported transfer coding"}
	errTooLarge      = &badRequest{status: 431, reason: "request head too large"}
	errBareLF        = refuse("bare LF in the request head")
	errBareCR        = refuse("bare CR in the request head")
)

// findHeadEnd returns the length of the head at the start of b (through
// its final CRLF CRLF), or -1 when b holds no whole head yet. from is where
// the previous search stopped. A bare LF or CR fails at once: a head of
// bare LF line ends would never end in CRLF CRLF.
func findHeadEnd(b []byte, from int) (int, *badRequest) {
	// a line at a time with IndexByte's vector scans (a byte loop was 1.6%
	// of a proxied request's instructions, callgrind)
	for i := from; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 { // no LF yet: a CR only as the last byte (its LF to come)
			if k := bytes.IndexByte(b[i:], '\r'); k >= 0 && i+k+1 < len(b) {
				return -1, errBareCR
			}
			return -1, nil
		}
		n := i + j                                           // the LF
		if n-1 > i && bytes.IndexByte(b[i:n-1], '\r') >= 0 { // (the first fault in byte order)
			return -1, errBareCR
		}
		if n == 0 || b[n-1] != '\r' {
			return -1, errBareLF
		}
		if n >= 3 && b[n-2] == '\n' && b[n-3] == '\r' {
			return n + 1, nil
		}
		i = n + 1
	}
	return -1, nil
}

// parseRequest parses one whole request head b, which ends with CRLF CRLF.
// h.fields keeps its capacity from the previous request.
func parseRequest(b []byte, h *reqHead) *badRequest {
	fields := h.fields[:0]
	*h = reqHead{contentLength: -1}
	// Every byte once: a CR only in a CRLF pair, no LF elsewhere, and no
	// control byte but HTAB.
	switch _, fault, _ := h1wire.CountLines(b); fault {
	case h1wire.BareCR:
		return errBareCR
	case h1wire.BareLF:
		return errBareLF
	case h1wire.ControlByte:
		return refuse("control byte in the request head")
	}
	s := string(b[:len(b)-2]) // each line ends in CRLF; the empty last line dropped

	eol, bad := h.requestLine(s)
	if bad != nil {
		return bad
	}
	var seen seenFields
	for pos := eol + 2; pos < len(s); {
		eol = strings.IndexByte(s[pos:], '\r') + pos
		// the name the state's previous head had at this place (still in
		// fields' array, past its length), for fieldLine to take where
		// the line holds it
		prev := ""
		if n := len(fields); n < cap(fields) {
			prev = fields[:n+1][n].name
		}
		name, value, bad := fieldLine(s[pos:eol], prev)
		if bad != nil {
			return bad
		}
		pos = eol + 2
		if bad := h.field(name, value, fields, &seen); bad != nil {
			return bad
		}
		fields = append(fields, field{name, value})
	}
	h.fields = fields
	if bad := h.framing(&seen); bad != nil {
		return bad
	}
	if h.handoff != "" {
		return nil
	}
	if !seen.host && h.minor == 1 {
		return refusePublic("missing required Host header")
	}
	if seen.host && !httpguts.ValidHostHeader(h.host) {
		return refusePublic("malformed Host header")
	}
	if h.method == "CONNECT" {
		h.handoff = "CONNECT"
		return nil
	}
	return parseTarget(h)
}

// requestLine parses request-line = method SP request-target SP
// HTTP-version, the first line of s; eol is where it ends. A version
// other than 1.0 and 1.1 goes to Caddy's server (net/http answers it: 400
// or 505).
func (h *reqHead) requestLine(s string) (eol int, bad *badRequest) {
	eol = strings.IndexByte(s, '\r')
	line := s[:eol]
	sp1 := strings.IndexByte(line, ' ')
	if sp1 <= 0 {
		return 0, refuse("malformed HTTP request")
	}
	h.method = line[:sp1]
	rest := line[sp1+1:]
	sp2 := strings.IndexByte(rest, ' ')
	if sp2 < 0 {
		return 0, refuse("malformed HTTP request")
	}
	h.target, h.proto = rest[:sp2], rest[sp2+1:]
	if !h1wire.ValidToken(h.method) {
		return 0, refuse("invalid method")
	}
	switch h.proto {
	case "HTTP/1.1":
		h.minor = 1
	case "HTTP/1.0":
	default:
		if !wellFormedVersion(h.proto) {
			// (net/http: 400, "malformed HTTP version")
			return 0, refuse("malformed HTTP version")
		}
		h.handoff = "HTTP version " + h.proto
	}
	if h.target == "" || strings.IndexByte(h.target, ' ') >= 0 {
		return 0, refuse("malformed HTTP request")
	}
	return eol, nil
}

// wellFormedVersion reports whether v is "HTTP/" digit "." digit, the
// versions net/http's ParseHTTPVersion reads; Caddy's server answers the
// others it reads (HTTP/1.2 as 1.x, HTTP/2.0 with 505).
func wellFormedVersion(v string) bool {
	return len(v) == len("HTTP/1.1") && strings.HasPrefix(v, "HTTP/") &&
		'0' <= v[5] && v[5] <= '9' && v[6] == '.' && '0' <= v[7] && v[7] <= '9'
}

// fieldLine splits a field line into its canonical name and its value
// without surrounding whitespace; obs-fold, a space before the colon and a
// byte no token may hold are refused, with net/http's words. prev is a
// name checked before (canonical, or ""): a line that holds it byte for
// byte before its colon has it as its name, without FieldName's scan (a
// client sends the same names request after request; ~190 instructions a
// name, callgrind).
func fieldLine(line, prev string) (name, value string, bad *badRequest) {
	if line[0] == ' ' || line[0] == '\t' {
		return "", "", refuse("obs-fold (a field line continued with whitespace)")
	}
	if prev != "" && len(line) > len(prev) && line[len(prev)] == ':' && line[:len(prev)] == prev {
		return prev, h1wire.TrimOWS(line[len(prev)+1:]), nil
	}
	name, colon, at := h1wire.FieldName(line)
	if at >= 0 {
		// a space before the colon gets net/http's public words, unless
		// another byte no token may hold comes before the colon
		for i := at; i < len(line) && line[i] != ':'; i++ {
			if c := line[i]; c != ' ' && !h1wire.IsTokenByte(c) {
				return "", "", refuse("invalid header name")
			}
		}
		if strings.IndexByte(line, ':') < 0 {
			return "", "", refuse("invalid header name")
		}
		return "", "", refusePublic("invalid header name")
	}
	if colon <= 0 {
		return "", "", refuse("invalid header name")
	}
	return name, h1wire.TrimOWS(line[colon+1:]), nil
}

// seenFields is what the fields of one head said about its framing.
type seenFields struct {
	cl, te, host bool
	teValue      string
}

// field takes in one field the plan itself acts on (framing, Host,
// Connection, Expect, the fields that send a request to Caddy's server);
// fields holds the ones before it.
func (h *reqHead) field(name, value string, fields []field, seen *seenFields) *badRequest {
	switch name {
	case "Host":
		if seen.host {
			return refuse("too many Host headers")
		}
		seen.host, h.host = true, value
	case "Content-Length":
		if seen.cl {
			return refuse("repeated Content-Length")
		}
		n, ok := h1wire.ParseDigits(value)
		if !ok {
			return refuse("invalid Content-Length")
		}
		seen.cl, h.contentLength = true, n
	case "Transfer-Encoding":
		if seen.te {
			return errUnsupportedTE
		}
		seen.te, seen.teValue = true, value
	case "Connection":
		h.reworked = true
		if h1wire.HasToken(value, "close") {
			h.close = true
		}
		if h1wire.HasToken(value, "keep-alive") {
			h.keepAlive10 = true
		}
	case "Expect":
		if strings.EqualFold(value, "100-continue") {
			h.expect100 = true
		} else if value != "" {
			h.expectFail = true // net/http answers 417
		}
	case "Upgrade":
		if h.handoff == "" {
			h.handoff = "Upgrade"
		}
	case "Trailer":
		if h.handoff == "" {
			h.handoff = "request trailers"
		}
	case "Pragma":
		h.reworked = true
		if value == "no-cache" && !h.pragmaNoCache && !hasField(fields, "Pragma") {
			h.pragmaNoCache = true
		}
	default:
		if isReworked(name) {
			h.reworked = true
		}
	}
	return nil
}

// framing decides, from the whole head, how the body is framed and
// whether the connection persists: HTTP/1.0 keep-alive, and a
// Transfer-Encoding that is exactly chunked and not beside Content-Length.
func (h *reqHead) framing(seen *seenFields) *badRequest {
	if h.minor == 0 {
		if seen.te {
			return refuse("Transfer-Encoding in an HTTP/1.0 request")
		}
		h.close = h.close || !h.keepAlive10
		h.keepAlive10 = h.keepAlive10 && !h.close
	} else {
		h.keepAlive10 = false
	}
	if seen.te {
		if seen.cl {
			return refuse("both Content-Length and Transfer-Encoding")
		}
		if !strings.EqualFold(seen.teValue, "chunked") {
			return errUnsupportedTE
		}
		h.chunked = true
	}
	return nil
}

// parseTarget splits an origin-form target into the path and query that
// net/http's url.ParseRequestURI gives. Other forms are served through
// Caddy's server handler; a target net/http refuses is refused.
func parseTarget(h *reqHead) *badRequest {
	t := h.target
	if t[0] != '/' {
		if _, err := url.ParseRequestURI(t); err != nil {
			return refuse("malformed request-target")
		}
		h.delegate = "request-target form" // absolute-form or "*"
		return nil
	}
	path, query, _ := strings.Cut(t, "?")
	h.rawQuery = query
	plain := true
	for i := 0; plain && i < len(t); i++ {
		plain = targetByte[t[i]]
	}
	for i := 0; plain && i < len(path); i++ {
		// bytes net/url escapes in a path: its URL then keeps a RawPath
		plain = !escapedInPath[path[i]]
	}
	if plain {
		h.path = path
	} else {
		// Percent-encoding or bytes a URL would escape: the path, RawPath
		// and query as net/http has them.
		u, err := url.ParseRequestURI(t)
		if err != nil {
			return refuse("malformed request-target") // (net/http: 400)
		}
		h.path, h.rawPath, h.rawQuery = u.Path, u.RawPath, u.RawQuery
	}
	// ACME HTTP challenges are answered by Caddy's TLS app, before routes.
	if strings.HasPrefix(h.path, acmeChallengePrefix) {
		h.delegate = "ACME HTTP challenge"
	}
	return nil
}

const acmeChallengePrefix = "/.well-known/acme-challenge/"

// escapedInPath are the target bytes net/url's path escaping does not
// leave as they are: a path with one gets its RawPath from url.ParseRequestURI.
var escapedInPath = [256]bool{'!': true, '*': true, '\'': true, '(': true, ')': true}

// targetByte is the set of bytes an origin-form target may hold without
// escaping: unreserved, sub-delims, ":", "@", "/", "?" (RFC 3986).
var targetByte = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~!$&'()*+,;=:@/?" {
		t[c] = true
	}
	return t
}()

func hasField(fields []field, name string) bool {
	for i := range fields {
		if fields[i].name == name {
			return true
		}
	}
	return false
}

// isReworked reports whether reverse_proxy changes or removes a request
// field of this (canonical) name on the way upstream, so that the plain
// lane cannot send the client's fields as they came (reqHead.reworked):
// the hop-by-hop fields, Via, X-Forwarded-* and Pragma (which, on
// HTTP/1, adds a Cache-Control), for both protocols' heads.
func isReworked(name string) bool {
	switch name {
	case "Via", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "Pragma":
		return true
	}
	return isHopHeader(name)
}
