package fastpath

import (
	"errors"
	"strings"

	"github.com/apigate/gateway/internal/h1wire"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2block is a stream's header block, decoded: what x/net's Framer makes
// a MetaHeadersFrame of (its ReadMetaHeaders), here into a slice the
// connection reuses. The Framer's made 11 allocations a request (the
// frame, its emit closure, the fields' slice growing) and cost about
// 3,000 instructions more (callgrind, h2load on h2c, 2026-12-06).
type h2block struct {
	id          uint32
	ended       bool // END_STREAM
	hasPriority bool
	priority    http2.PriorityParam
	truncated   bool // over MAX_HEADER_LIST_SIZE: the rest was dropped
	fields      []hpack.HeaderField
	npseudo     int // fields[:npseudo] are the pseudo-header fields

	// while decoding
	headersLeft, trailersLeft uint32
	sawRegular                bool
	invalid                   error
}

func (b *h2block) pseudo() []hpack.HeaderField  { return b.fields[:b.npseudo] }
func (b *h2block) regular() []hpack.HeaderField { return b.fields[b.npseudo:] }

var (
	errH2FieldValue       = errors.New("invalid header field value")
	errH2FieldName        = errors.New("invalid header field name")
	errH2PseudoAfter      = errors.New("pseudo header field after regular")
	errH2PseudoUnknown    = errors.New("invalid pseudo-header")
	errH2PseudoDuplicate  = errors.New("duplicate pseudo-header")
	errH2PseudoMixedTypes = errors.New("mix of request and response pseudo headers")
)

// readBlock decodes the header block hf begins, reading the CONTINUATION
// frames that end it, with x/net's readMetaFrame's rules: fields over
// the header list size are dropped (truncated); a fragment more than
// twice the size left, or any fragment after an invalid field, ends the
// connection (CVE-2023-45288); an HPACK error is a COMPRESSION_ERROR; an
// invalid field or pseudo-header a stream error.
func (sc *h2conn) readBlock(hf *http2.HeadersFrame) (*h2block, error) {
	b := &sc.blk
	clear(b.fields)
	max := sc.maxHeaderListSize()
	*b = h2block{id: hf.StreamID, ended: hf.StreamEnded(), hasPriority: hf.HasPriority(), priority: hf.Priority,
		fields: b.fields[:0], headersLeft: max, trailersLeft: max}
	sc.dec.SetEmitEnabled(true)
	sc.dec.SetMaxStringLength(int(max))
	frag, ended := hf.HeaderBlockFragment(), hf.HeadersEnded()
	for {
		if int64(len(frag)) > 2*(int64(b.headersLeft)+int64(b.trailersLeft)) || b.invalid != nil {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := sc.dec.Write(frag); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		f, err := sc.fr.ReadFrame() // (the fragment above is not used past this)
		if err != nil {
			return nil, err
		}
		c, ok := f.(*http2.ContinuationFrame) // (the Framer's frame order check makes it one)
		if !ok {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		frag, ended = c.HeaderBlockFragment(), c.HeadersEnded()
	}
	if err := sc.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if b.invalid != nil {
		return nil, http2.StreamError{StreamID: b.id, Code: http2.ErrCodeProtocol, Cause: b.invalid}
	}
	if err := checkPseudos(b.pseudo()); err != nil {
		return nil, http2.StreamError{StreamID: b.id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	return b, nil
}

// emitField is the decoder's: one field of the block being read.
func (sc *h2conn) emitField(hf hpack.HeaderField) {
	b := &sc.blk
	if !h1wire.ValidFieldValue(hf.Value) {
		b.invalid = errH2FieldValue
	}
	if strings.HasPrefix(hf.Name, ":") {
		if b.sawRegular {
			b.invalid = errH2PseudoAfter
		}
	} else {
		b.sawRegular = true
		if !validWireName(hf.Name) {
			b.invalid = errH2FieldName
		}
	}
	if b.invalid != nil {
		sc.dec.SetEmitEnabled(false)
		return
	}
	left, size := &b.headersLeft, hf.Size()
	if hf.Name == "trailer" { // (x/net's budget for a Trailer field's names)
		left = &b.trailersLeft
		n := strings.Count(hf.Value, ",") + 1
		size = uint32(len(hf.Value)-n+1) + uint32(n)*hpack.HeaderField{}.Size()
	}
	if size > *left {
		sc.dec.SetEmitEnabled(false)
		b.truncated = true
		b.headersLeft, b.trailersLeft = 0, 0
		return
	}
	*left -= size
	b.fields = append(b.fields, hf)
	if !b.sawRegular {
		b.npseudo = len(b.fields)
	}
}

// checkPseudos is x/net's MetaHeadersFrame.checkPseudos: known names, no
// duplicates, not both request and response ones.
func checkPseudos(pf []hpack.HeaderField) error {
	var isRequest, isResponse bool
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			isRequest = true
		case ":status":
			isResponse = true
		default:
			return errH2PseudoUnknown
		}
		for _, hf2 := range pf[:i] {
			if hf.Name == hf2.Name {
				return errH2PseudoDuplicate
			}
		}
	}
	if isRequest && isResponse {
		return errH2PseudoMixedTypes
	}
	return nil
}
