package auditchain

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// VerifyOptions relax or tighten what Verify accepts.
type VerifyOptions struct {
	// AnyOrder accepts a chain's events in any order: each chain's events
	// are sorted by seq before they are checked, so that only missing and
	// altered events count. Without it, a lower seq after a higher one of
	// the same chain is an error ("reordered").
	AnyOrder bool
	// AllowUnchained accepts events without chain, seq and hash (recorded
	// while no chain was configured) and counts them in Report.Unchained.
	AllowUnchained bool
	// RequireFinal makes it an error that a chain's last event is not a
	// final checkpoint, that is, that the trail may have been cut (or the
	// gateway did not stop cleanly, or is still running).
	RequireFinal bool
}

// Report is what Verify found in a trail that verifies.
type Report struct {
	// Chains are the chains of the trail, in the order of their first
	// event.
	Chains []ChainReport
	// Duplicates counts exact copies of events already seen (at-least-once
	// delivery), which are skipped.
	Duplicates int
	// Unchained counts the events without a chain (VerifyOptions.AllowUnchained).
	Unchained int
}

// ChainReport describes one verified chain.
type ChainReport struct {
	// ID is the chain's id.
	ID string
	// Node is the chain_start event's node.
	Node string
	// Events counts the chain's events, chain_start and checkpoints
	// included, duplicates not.
	Events int
	// LastSeq is the seq of the chain's last event (its first is 0).
	LastSeq uint64
	// Checkpoints counts the checkpoints (all of which verified).
	Checkpoints int
	// SignedThrough is the last seq a checkpoint signature covers, -1 when
	// the chain has no checkpoint yet.
	SignedThrough int64
	// Final reports that the chain's last event is a final checkpoint: the
	// gateway stopped cleanly and nothing was cut from the end.
	Final bool
	// Unsigned counts the events after the last checkpoint (all events
	// when there is none): their hashes link, but no signature covers them
	// yet, so events at the end of the chain could have been removed or
	// added. A running gateway signs them at its next checkpoint.
	Unsigned int
}

// VerifyError is the first problem Verify found in a trail.
type VerifyError struct {
	// File is the name of the Part the line is in ("" from Verify).
	File string
	// Line is the 1-based line of the event with the problem.
	Line int
	// Index is the 1-based position of the event in a line that holds a
	// JSON array of events (an HTTP sink's batch), 0 for a line that holds
	// one event.
	Index int
	// Chain is the chain's id, "" when the problem is not in a chain (the
	// line is not JSON, the event has no chain).
	Chain string
	// Seq is the seq the problem is about, -1 when there is none.
	Seq int64
	// Problem says what is wrong.
	Problem string
}

// Error returns "[file: ]line L: chain C: problem".
func (e *VerifyError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	b.WriteString(lineName(e.Line, e.Index))
	if e.Chain != "" {
		b.WriteString(": chain ")
		b.WriteString(e.Chain)
	}
	b.WriteString(": ")
	b.WriteString(e.Problem)
	return b.String()
}

// lineName names a line, and the event in it when the line is an array.
func lineName(line, index int) string {
	if index > 0 {
		return fmt.Sprintf("line %d (event %d of the array)", line, index)
	}
	return "line " + strconv.Itoa(line)
}

// Verify checks an audit trail against the public key of its chains. r
// holds JSON lines: one event per line (a file sink's output), or a JSON
// array of events (an HTTP sink's batch body); blank lines are skipped.
// The events of several chains may be mixed in any way (a file appended
// across restarts, several gateways' events collected into one file):
// each chain is checked on its own.
//
// A chain verifies when its events, from seq 0 (chain_start, made with
// pub) on, are all present, in order (see VerifyOptions.AnyOrder),
// unaltered, and every checkpoint's signature verifies with pub. Events
// after the last checkpoint are not an error; the report counts them
// (ChainReport.Unsigned). Exact copies of an event are skipped and
// counted.
//
// The error is a *VerifyError for the first problem in the trail (by line)
// or an error reading r. On error the report is nil.
func Verify(r io.Reader, pub ed25519.PublicKey, opt VerifyOptions) (*Report, error) {
	return VerifyParts([]Part{{R: r}}, pub, opt)
}

// Part is one piece of a trail, such as one of the files a trail was
// rotated into.
type Part struct {
	// Name names the part in errors (VerifyError.File), a file name.
	Name string
	// R holds JSON lines, as for Verify.
	R io.Reader
}

// VerifyParts is Verify for a trail in several parts, read in order as if
// they were one (oldest file first), with lines counted in each part. A
// problem's position names its part.
func VerifyParts(parts []Part, pub ed25519.PublicKey, opt VerifyOptions) (*Report, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("auditchain: a public key of %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	v := &verifier{pub: pub, keyID: KeyID(pub), opt: opt, chains: map[string]*chainState{}}
	var buf []byte
	for i, part := range parts {
		v.names = append(v.names, part.Name)
		br := bufio.NewReaderSize(part.R, 64<<10)
		for n := 1; ; n++ {
			var err error
			buf, err = readLine(br, buf[:0])
			if err != nil && err != io.EOF {
				if part.Name != "" {
					return nil, fmt.Errorf("%s: reading line %d: %w", part.Name, n, err)
				}
				return nil, fmt.Errorf("reading line %d: %w", n, err)
			}
			if len(buf) > 0 {
				v.line(pos{file: i, line: n}, buf)
			}
			if err == io.EOF {
				break
			}
		}
	}
	return v.finish()
}

// readLine appends the next line of br to buf, without its "\n". Lines
// have no length limit. It returns io.EOF (with the last line, if it does
// not end in "\n") at the end of the input.
func readLine(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		b, err := br.ReadSlice('\n')
		buf = append(buf, b...)
		switch err {
		case nil:
			return buf[:len(buf)-1], nil
		case bufio.ErrBufferFull:
			continue
		}
		return buf, err
	}
}

// pos is where an event is: its part, line and index in an array line.
type pos struct{ file, line, index int }

// before orders positions in the trail.
func (p pos) before(q pos) bool {
	if p.file != q.file {
		return p.file < q.file
	}
	if p.line != q.line {
		return p.line < q.line
	}
	return p.index < q.index
}

type verifier struct {
	names  []string // of the parts
	pub    ed25519.PublicKey
	keyID  string
	opt    VerifyOptions
	chains map[string]*chainState
	order  []*chainState
	rep    Report
	first  *VerifyError
	at     pos // of first
}

// event is one chained event of the trail.
type event struct {
	pos
	chain string
	seq   uint64
	hash  [32]byte
	body  []byte // canonical JSON without "hash"

	kind                    string
	node, keyID             string
	lastSeq                 uint64
	lastHash, signature     string
	final                   bool
	problem                 string // with its kind's members, reported in chain order
	hasLastSeq, hasLastHash bool
	hasKeyID, hasSignature  bool
}

// seqRecord is what a chain keeps of each event it verified.
type seqRecord struct {
	hash [32]byte
	at   pos
}

// gapState follows a chain (in file order) after a seq jumped forward:
// the events in between are missing, unless one of them comes later
// (reordered).
type gapState struct {
	at        pos    // of the event that jumped
	want, got uint64 // the seq expected there and the one found
	max       uint64 // the highest seq since
	maxAt     pos
	seen      map[uint64]bool
}

type chainState struct {
	rep     int // index in Report.Chains
	next    uint64
	recs    []seqRecord // recs[s] for s < next
	failed  bool
	gap     *gapState
	pending []*event // AnyOrder: checked in finish
	last    seqRecord
}

// fail records a problem at p; Verify returns the first one in the trail.
func (v *verifier) fail(p pos, chain string, seq int64, problem string) {
	if v.first != nil && !p.before(v.at) {
		return
	}
	v.at = p
	v.first = &VerifyError{File: v.names[p.file], Line: p.line, Index: p.index, Chain: chain, Seq: seq, Problem: problem}
}

func (v *verifier) failEvent(c *chainState, ev *event, seq int64, format string, args ...any) {
	c.failed = true
	v.fail(ev.pos, ev.chain, seq, fmt.Sprintf(format, args...))
}

// where names position p in a problem found at from.
func (v *verifier) where(p, from pos) string {
	s := lineName(p.line, p.index)
	if p.file != from.file && v.names[p.file] != "" {
		s += " of " + v.names[p.file]
	}
	return s
}

// line checks one non-empty line.
func (v *verifier) line(at pos, b []byte) {
	if at.line == 1 {
		b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return
	}
	canon, err := Canonical(b)
	if err != nil {
		v.fail(at, "", -1, "invalid JSON: "+err.Error())
		return
	}
	switch canon[0] {
	case '{':
		v.event(at, canon)
	case '[':
		d := json.NewDecoder(bytes.NewReader(canon))
		d.Token() // [
		for i := 1; d.More(); i++ {
			at.index = i
			var raw json.RawMessage
			if err := d.Decode(&raw); err != nil { // canonical JSON: cannot fail
				v.fail(at, "", -1, "invalid JSON: "+err.Error())
				return
			}
			if raw[0] != '{' {
				v.fail(at, "", -1, "not a JSON object")
				continue
			}
			v.event(at, raw)
		}
	default:
		v.fail(at, "", -1, "not a JSON object (nor an array of objects)")
	}
}

// members returns the members of a canonical JSON object, in order. The
// object is Canonical's output: compact and valid, so a scan for the ends
// of strings and brackets splits it.
func members(canon []byte) (keys []string, vals []json.RawMessage) {
	i := 1 // after '{'
	for i < len(canon) && canon[i] == '"' {
		end := endOfString(canon, i)
		key := string(canon[i+1 : end-1])
		if strings.IndexByte(key, '\\') >= 0 {
			json.Unmarshal(canon[i:end], &key)
		}
		i = end + 1 // after ':'
		start, depth := i, 0
	value:
		for ; i < len(canon); i++ {
			switch canon[i] {
			case '"':
				i = endOfString(canon, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth == 0 {
					break value
				}
				depth--
			case ',':
				if depth == 0 {
					break value
				}
			}
		}
		keys = append(keys, key)
		vals = append(vals, canon[start:i])
		i++ // after ',' or '}'
	}
	return keys, vals
}

// endOfString returns the index after the JSON string that starts at b[i].
func endOfString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// event parses one event (canonical JSON of an object) and checks it in
// its chain.
func (v *verifier) event(at pos, canon []byte) {
	keys, vals := members(canon)
	ev := &event{pos: at}
	bad := func(chain string, format string, args ...any) {
		v.fail(at, chain, -1, fmt.Sprintf(format, args...))
	}

	// The body is the event without "hash"; the members are in canonical
	// order already.
	body := make([]byte, 0, len(canon))
	body = append(body, '{')
	var chainRaw, seqRaw, hashRaw json.RawMessage
	m := map[string]json.RawMessage{}
	for i, k := range keys {
		m[k] = vals[i]
		switch k {
		case "hash":
			hashRaw = vals[i]
			continue
		case "chain":
			chainRaw = vals[i]
		case "seq":
			seqRaw = vals[i]
		}
		if len(body) > 1 {
			body = append(body, ',')
		}
		body = AppendString(body, k)
		body = append(body, ':')
		body = append(body, vals[i]...)
	}
	ev.body = append(body, '}')

	if chainRaw == nil && seqRaw == nil && hashRaw == nil {
		if v.opt.AllowUnchained {
			v.rep.Unchained++
			return
		}
		bad("", "not part of a chain (no chain, seq and hash members)")
		return
	}
	var missing []string
	for _, x := range []struct {
		name string
		raw  json.RawMessage
	}{{"chain", chainRaw}, {"seq", seqRaw}, {"hash", hashRaw}} {
		if x.raw == nil {
			missing = append(missing, `"`+x.name+`"`)
		}
	}
	if len(missing) > 0 {
		bad("", "incomplete chain members: no %s", strings.Join(missing, " or "))
		return
	}
	var ok bool
	if ev.chain, ok = hexString(chainRaw, 16); !ok {
		bad("", "chain %s is not a string of 16 lowercase hex digits", chainRaw)
		return
	}
	if ev.seq, ok = uintNumber(seqRaw); !ok {
		bad(ev.chain, "seq %s is not a non-negative integer", seqRaw)
		return
	}
	h, ok := hexString(hashRaw, 64)
	if !ok {
		bad(ev.chain, "seq %d: hash %s is not a string of 64 lowercase hex digits", ev.seq, hashRaw)
		return
	}
	hex.Decode(ev.hash[:], []byte(h))

	// The members of chain_start and checkpoint events. A problem with
	// them is reported when the chain gets to the event.
	if raw, ok := m["kind"]; ok {
		if err := json.Unmarshal(raw, &ev.kind); err != nil {
			ev.problem = fmt.Sprintf("kind %s is not a string", raw)
		}
	}
	str := func(name string, dst *string) bool {
		raw, ok := m[name]
		if !ok {
			return false
		}
		if json.Unmarshal(raw, dst) != nil && ev.problem == "" {
			ev.problem = fmt.Sprintf("%s %s is not a string", name, raw)
		}
		return true
	}
	switch ev.kind {
	case KindStart:
		str("node", &ev.node)
		ev.hasKeyID = str("key_id", &ev.keyID)
	case KindCheckpoint:
		ev.hasKeyID = str("key_id", &ev.keyID)
		ev.hasLastHash = str("last_hash", &ev.lastHash)
		ev.hasSignature = str("signature", &ev.signature)
		if raw, ok := m["last_seq"]; ok {
			ev.hasLastSeq = true
			if ev.lastSeq, ok = uintNumber(raw); !ok && ev.problem == "" {
				ev.problem = fmt.Sprintf("last_seq %s is not a non-negative integer", raw)
			}
		}
		if raw, ok := m["final"]; ok && json.Unmarshal(raw, &ev.final) != nil && ev.problem == "" {
			ev.problem = fmt.Sprintf("final %s is not true or false", raw)
		}
	}

	c := v.chains[ev.chain]
	if c == nil {
		c = &chainState{rep: len(v.rep.Chains)}
		v.rep.Chains = append(v.rep.Chains, ChainReport{ID: ev.chain, SignedThrough: -1})
		v.chains[ev.chain] = c
		v.order = append(v.order, c)
	}
	if v.opt.AnyOrder {
		c.pending = append(c.pending, ev)
		return
	}
	v.feed(c, ev)
}

// hexString decodes a JSON string of n lowercase hex digits.
func hexString(raw json.RawMessage, n int) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil || len(s) != n {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return "", false
		}
	}
	return s, true
}

// uintNumber decodes a JSON number that is a non-negative integer.
func uintNumber(raw json.RawMessage) (uint64, bool) {
	n, err := strconv.ParseUint(string(raw), 10, 64)
	return n, err == nil
}

// feed checks the next event of a chain: in file order, or in seq order
// with VerifyOptions.AnyOrder.
func (v *verifier) feed(c *chainState, ev *event) {
	switch {
	case c.failed:
	case c.gap != nil:
		v.afterGap(c, ev)
	case ev.seq < c.next:
		v.again(c, ev)
	case ev.seq > c.next:
		if v.opt.AnyOrder {
			v.missing(c, ev, c.next)
			return
		}
		c.gap = &gapState{at: ev.pos, want: c.next, got: ev.seq, max: ev.seq, maxAt: ev.pos,
			seen: map[uint64]bool{ev.seq: true}}
	default:
		v.link(c, ev)
	}
}

// missing reports the events from seq want up to ev.
func (v *verifier) missing(c *chainState, ev *event, want uint64) {
	switch {
	case want == 0:
		v.failEvent(c, ev, int64(ev.seq), "chain starts at seq %d: events before it are missing", ev.seq)
	case ev.seq == want+1:
		v.failEvent(c, ev, int64(want), "seq %d missing (%s has seq %d)", want, v.where(ev.pos, ev.pos), ev.seq)
	default:
		v.failEvent(c, ev, int64(want), "seqs %d to %d missing (%s has seq %d)", want, ev.seq-1, v.where(ev.pos, ev.pos), ev.seq)
	}
}

// afterGap follows a chain whose seq jumped forward: an event from the
// gap that comes later means the events were reordered, else they are
// missing (finish reports it).
func (v *verifier) afterGap(c *chainState, ev *event) {
	g := c.gap
	if ev.seq < c.next {
		return // a copy of an event before the gap: the gap decides
	}
	if ev.seq < g.max && !g.seen[ev.seq] {
		v.failEvent(c, ev, int64(ev.seq), "seq %d reordered: it comes after seq %d (%s)", ev.seq, g.max, v.where(g.maxAt, ev.pos))
		return
	}
	g.seen[ev.seq] = true
	if ev.seq > g.max {
		g.max, g.maxAt = ev.seq, ev.pos
	}
}

// prevHash is the previous hash of the event with seq, which is at most
// c.next.
func (c *chainState) prevHash(seq uint64) string {
	if seq == 0 {
		return Genesis
	}
	return hex.EncodeToString(c.recs[seq-1].hash[:])
}

// again checks an event whose seq the chain has verified already: an
// exact copy is skipped.
func (v *verifier) again(c *chainState, ev *event) {
	rec := c.recs[ev.seq]
	if rec.hash != ev.hash {
		v.failEvent(c, ev, int64(ev.seq), "seq %d altered: two copies with different content (the other on %s)", ev.seq, v.where(rec.at, ev.pos))
		return
	}
	if Link(c.prevHash(ev.seq), ev.body) != hex.EncodeToString(ev.hash[:]) {
		v.failEvent(c, ev, int64(ev.seq), "seq %d altered: hash does not match content (a changed copy of %s)", ev.seq, v.where(rec.at, ev.pos))
		return
	}
	v.rep.Duplicates++
}

// link checks the event with the next seq of a chain.
func (v *verifier) link(c *chainState, ev *event) {
	seq := int64(ev.seq)
	prev := c.prevHash(ev.seq)
	if Link(prev, ev.body) != hex.EncodeToString(ev.hash[:]) {
		if ev.seq == 0 {
			v.failEvent(c, ev, seq, "seq 0 altered: hash does not match content")
		} else {
			p := c.recs[ev.seq-1]
			v.failEvent(c, ev, seq, "seq %d altered: hash does not match content (or seq %d, %s, was changed and its hash recomputed)",
				ev.seq, ev.seq-1, v.where(p.at, ev.pos))
		}
		return
	}
	if ev.problem != "" {
		v.failEvent(c, ev, seq, "seq %d: %s", ev.seq, ev.problem)
		return
	}
	rep := &v.rep.Chains[c.rep]
	checkpoint := false
	switch {
	case ev.seq == 0:
		if ev.kind != KindStart {
			v.failEvent(c, ev, seq, "seq 0 is not a chain_start event (kind %q)", ev.kind)
			return
		}
		if !ev.hasKeyID {
			v.failEvent(c, ev, seq, "chain_start has no key_id")
			return
		}
		if ev.keyID != v.keyID {
			v.failEvent(c, ev, seq, "the chain was started for key %s, not the given key %s", ev.keyID, v.keyID)
			return
		}
		rep.Node = ev.node
	case ev.kind == KindStart:
		v.failEvent(c, ev, seq, "seq %d is a second chain_start", ev.seq)
		return
	case ev.kind == KindCheckpoint:
		if !v.checkpoint(c, ev, prev) {
			return
		}
		checkpoint = true
	}
	rec := seqRecord{hash: ev.hash, at: ev.pos}
	c.recs = append(c.recs, rec)
	c.next++
	c.last = rec
	rep.Events++
	rep.LastSeq = ev.seq
	if checkpoint {
		rep.Checkpoints++
		rep.SignedThrough = int64(ev.lastSeq)
		rep.Unsigned = 0
		rep.Final = ev.final
	} else {
		rep.Unsigned++
		rep.Final = false
	}
}

// checkpoint checks a checkpoint whose hash links; prev is the hash of the
// event before it.
func (v *verifier) checkpoint(c *chainState, ev *event, prev string) bool {
	seq := int64(ev.seq)
	for _, m := range []struct {
		ok   bool
		name string
	}{{ev.hasLastSeq, "last_seq"}, {ev.hasLastHash, "last_hash"}, {ev.hasKeyID, "key_id"}, {ev.hasSignature, "signature"}} {
		if !m.ok {
			v.failEvent(c, ev, seq, "seq %d checkpoint has no %s", ev.seq, m.name)
			return false
		}
	}
	if ev.lastSeq != ev.seq-1 {
		v.failEvent(c, ev, seq, "seq %d checkpoint: last_seq is %d, not %d", ev.seq, ev.lastSeq, ev.seq-1)
		return false
	}
	if ev.lastHash != prev {
		p := c.recs[ev.seq-1]
		v.failEvent(c, ev, seq, "seq %d checkpoint: last_hash is not the hash of seq %d (%s): an event up to it was changed and its hash recomputed",
			ev.seq, ev.lastSeq, v.where(p.at, ev.pos))
		return false
	}
	if ev.keyID != v.keyID {
		v.failEvent(c, ev, seq, "seq %d checkpoint: signed by another key (key_id %s, the given key is %s)", ev.seq, ev.keyID, v.keyID)
		return false
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(ev.signature)
	if err != nil {
		v.failEvent(c, ev, seq, "seq %d checkpoint: signature is not base64: %v", ev.seq, err)
		return false
	}
	if !ed25519.Verify(v.pub, CheckpointMessage(ev.chain, ev.lastSeq, ev.lastHash), sig) {
		v.failEvent(c, ev, seq, "seq %d checkpoint: signature does not verify: an event up to seq %d was changed and the hashes after it recomputed, or the checkpoint is forged",
			ev.seq, ev.lastSeq)
		return false
	}
	return true
}

// finish checks what can only be checked at the end of the trail.
func (v *verifier) finish() (*Report, error) {
	for _, c := range v.order {
		if v.opt.AnyOrder {
			slices.SortStableFunc(c.pending, func(a, b *event) int {
				switch {
				case a.seq < b.seq:
					return -1
				case a.seq > b.seq:
					return 1
				}
				return 0
			})
			for _, ev := range c.pending {
				v.feed(c, ev)
			}
			c.pending = nil
		}
		if c.gap != nil && !c.failed {
			g := c.gap
			v.missing(c, &event{pos: g.at, chain: v.rep.Chains[c.rep].ID, seq: g.got}, g.want)
		}
		if rep := v.rep.Chains[c.rep]; v.opt.RequireFinal && !c.failed && !rep.Final {
			v.failEvent(c, &event{pos: c.last.at, chain: rep.ID}, int64(rep.LastSeq),
				"no final checkpoint: the trail may be cut after seq %d", rep.LastSeq)
		}
	}
	if v.first != nil {
		return nil, v.first
	}
	return &v.rep, nil
}
