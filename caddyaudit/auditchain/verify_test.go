package auditchain

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// trail writes a chain as the gateway does: a chain_start, request events,
// checkpoints. Its events are maps, so that tests can edit them.
type trail struct {
	t      testing.TB
	priv   ed25519.PrivateKey
	chain  string
	events []map[string]any
	clock  time.Time
}

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func newTrail(t testing.TB, priv ed25519.PrivateKey, chain string) *trail {
	tr := &trail{t: t, priv: priv, chain: chain, clock: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	tr.add(map[string]any{"kind": KindStart, "node": "gw-1", "key_id": KeyID(priv.Public().(ed25519.PublicKey))})
	return tr
}

// makeTrail writes a chain of n requests with a checkpoint after every
// every requests and, if final, a final checkpoint.
func makeTrail(t testing.TB, priv ed25519.PrivateKey, chain string, n, every int, final bool) *trail {
	tr := newTrail(t, priv, chain)
	for i := 1; i <= n; i++ {
		tr.request()
		if i%every == 0 {
			tr.checkpoint(false)
		}
	}
	if final {
		tr.checkpoint(true)
	}
	return tr
}

func (tr *trail) add(m map[string]any) {
	seq := len(tr.events)
	tr.clock = tr.clock.Add(1500 * time.Millisecond)
	m["time"] = tr.clock.Format(time.RFC3339Nano)
	m["chain"] = tr.chain
	m["seq"] = seq
	if _, ok := m["request_id"]; !ok {
		m["request_id"] = fmt.Sprintf("%s-%d", tr.chain, seq)
	}
	tr.events = append(tr.events, m)
	tr.seal(seq)
}

func (tr *trail) request() {
	n := len(tr.events)
	tr.add(map[string]any{
		"request_id": fmt.Sprintf("req-%d", n), "route": "orders", "method": "GET", "host": "api.example.com",
		"path": fmt.Sprintf("/orders/%d?q=<a&b>", n), "status": 200, "duration_ms": 1.25 * float64(n),
		"remote_ip": "192.0.2.7", "subject": "alice", "roles": []string{"reader", "ops"}, "decision": "allow",
		"reason": "", "bytes_out": 512 * n, "extra": map[string]string{"tenant": "t1", "ünïcode": "€"},
		"decided_by": "rbac: require any reader,ops", "permission_cache": "hit", "auth": "api_key", "credential_id": "k_1",
	})
}

func (tr *trail) checkpoint(final bool) {
	last := len(tr.events) - 1
	lastHash := tr.hash(last)
	m := map[string]any{"kind": KindCheckpoint, "key_id": KeyID(tr.priv.Public().(ed25519.PublicKey)),
		"last_seq": last, "last_hash": lastHash, "signature": sign(tr.priv, tr.chain, last, lastHash)}
	if final {
		m["final"] = true
	}
	tr.add(m)
}

func sign(priv ed25519.PrivateKey, chain string, lastSeq int, lastHash string) string {
	return base64.StdEncoding.EncodeToString(ed25519.Sign(priv, CheckpointMessage(chain, uint64(lastSeq), lastHash)))
}

func (tr *trail) hash(seq int) string { return tr.events[seq]["hash"].(string) }

// seal recomputes the hash of one event from its content and the hash of
// the event before it.
func (tr *trail) seal(seq int) {
	tr.t.Helper()
	prev := Genesis
	if seq > 0 {
		prev = tr.hash(seq - 1)
	}
	m := maps.Clone(tr.events[seq])
	delete(m, "hash")
	raw, err := json.Marshal(m)
	if err != nil {
		tr.t.Fatal(err)
	}
	canon, err := Canonical(raw)
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.events[seq]["hash"] = Link(prev, canon)
}

// rehash recomputes the hashes from seq on, as someone who edited an
// event and has no private key would: checkpoints keep their signatures;
// their last_hash follows the new hashes when fixLastHash.
func (tr *trail) rehash(from int, fixLastHash bool) {
	for seq := from; seq < len(tr.events); seq++ {
		if tr.events[seq]["kind"] == KindCheckpoint && fixLastHash {
			tr.events[seq]["last_hash"] = tr.hash(seq - 1)
		}
		tr.seal(seq)
	}
}

func (tr *trail) line(seq int) string {
	tr.t.Helper()
	b, err := json.Marshal(tr.events[seq])
	if err != nil {
		tr.t.Fatal(err)
	}
	return string(b)
}

func (tr *trail) lines() []string {
	var l []string
	for seq := range tr.events {
		l = append(l, tr.line(seq))
	}
	return l
}

func verifyLines(lines []string, pub ed25519.PublicKey, opt VerifyOptions) (*Report, error) {
	return Verify(strings.NewReader(strings.Join(lines, "\n")+"\n"), pub, opt)
}

func deleteLines(l []string, i, n int) []string { return slices.Delete(slices.Clone(l), i, i+n) }

func insertLine(l []string, i int, s ...string) []string {
	return slices.Insert(slices.Clone(l), i, s...)
}

func TestVerifyIntactTrail(t *testing.T) {
	pub, priv := newKey(t)
	tr := makeTrail(t, priv, "3f9a0c1d2e3f4a5b", 20, 5, true)
	rep, err := verifyLines(tr.lines(), pub, VerifyOptions{RequireFinal: true})
	if err != nil {
		t.Fatal(err)
	}
	want := ChainReport{ID: "3f9a0c1d2e3f4a5b", Node: "gw-1", Events: 26, LastSeq: 25, Checkpoints: 5,
		SignedThrough: 24, Final: true, Unsigned: 0}
	if len(rep.Chains) != 1 || rep.Chains[0] != want || rep.Duplicates != 0 || rep.Unchained != 0 {
		t.Fatalf("report %+v, want one chain %+v", rep, want)
	}
}

// TestVerifyFindsTampering edits a valid trail in the ways an audit trail
// is damaged or tampered with and checks that Verify names the first
// problem: its line, chain, seq and what is wrong.
func TestVerifyFindsTampering(t *testing.T) {
	pub, priv := newKey(t)
	otherPub, otherPriv := newKey(t)
	const chain = "3f9a0c1d2e3f4a5b"
	// Seq 0 is the chain_start, checkpoints are seqs 6, 12, 18 and 24,
	// the final checkpoint is seq 25; seq s is on line s+1.
	fresh := func() *trail { return makeTrail(t, priv, chain, 20, 5, true) }

	cases := []struct {
		name    string
		opt     VerifyOptions
		key     ed25519.PublicKey
		lines   func() []string
		line    int
		index   int
		chain   string
		seq     int64
		problem string
	}{{
		name:  "deleted line",
		lines: func() []string { return deleteLines(fresh().lines(), 8, 1) },
		line:  9, chain: chain, seq: 8, problem: "seq 8 missing (line 9 has seq 9)",
	}, {
		name:  "deleted lines",
		lines: func() []string { return deleteLines(fresh().lines(), 8, 3) },
		line:  9, chain: chain, seq: 8, problem: "seqs 8 to 10 missing (line 9 has seq 11)",
	}, {
		name:  "deleted line, any order",
		opt:   VerifyOptions{AnyOrder: true},
		lines: func() []string { l := deleteLines(fresh().lines(), 8, 1); slices.Reverse(l); return l },
		line:  len(fresh().events) - 9, chain: chain, seq: 8, problem: "seq 8 missing (line 17 has seq 9)",
	}, {
		name:  "deleted chain_start",
		lines: func() []string { return deleteLines(fresh().lines(), 0, 1) },
		line:  1, chain: chain, seq: 1, problem: "chain starts at seq 1: events before it are missing",
	}, {
		name: "edited field",
		lines: func() []string {
			tr := fresh()
			tr.events[8]["status"] = 403
			return tr.lines()
		},
		line: 9, chain: chain, seq: 8, problem: "seq 8 altered: hash does not match content",
	}, {
		name: "edited field, its hash recomputed",
		lines: func() []string {
			tr := fresh()
			tr.events[8]["status"] = 403
			tr.seal(8)
			return tr.lines()
		},
		line: 10, chain: chain, seq: 9,
		problem: "seq 9 altered: hash does not match content (or seq 8, line 9, was changed and its hash recomputed)",
	}, {
		name: "edited field, all hashes after it recomputed",
		lines: func() []string {
			tr := fresh()
			tr.events[8]["status"] = 403
			tr.rehash(8, true)
			return tr.lines()
		},
		line: 13, chain: chain, seq: 12, problem: "seq 12 checkpoint: signature does not verify",
	}, {
		name: "edited field, hashes recomputed but not the checkpoint's last_hash",
		lines: func() []string {
			tr := fresh()
			tr.events[8]["status"] = 403
			tr.rehash(8, false)
			return tr.lines()
		},
		line: 13, chain: chain, seq: 12, problem: "seq 12 checkpoint: last_hash is not the hash of seq 11 (line 12)",
	}, {
		name: "edited chain_start",
		lines: func() []string {
			tr := fresh()
			tr.events[0]["node"] = "gw-2"
			return tr.lines()
		},
		line: 1, chain: chain, seq: 0, problem: "seq 0 altered: hash does not match content",
	}, {
		name:  "swapped lines",
		lines: func() []string { l := fresh().lines(); l[8], l[9] = l[9], l[8]; return l },
		line:  10, chain: chain, seq: 8, problem: "seq 8 reordered: it comes after seq 9 (line 9)",
	}, {
		name: "line moved to the end",
		lines: func() []string {
			l := fresh().lines()
			return append(deleteLines(l, 3, 1), l[3])
		},
		line: 26, chain: chain, seq: 3, problem: "seq 3 reordered: it comes after seq 25 (line 25)",
	}, {
		name: "chain_start moved down",
		lines: func() []string {
			l := fresh().lines()
			return insertLine(deleteLines(l, 0, 1), 2, l[0])
		},
		line: 3, chain: chain, seq: 0, problem: "seq 0 reordered: it comes after seq 2 (line 2)",
	}, {
		name: "a copy with other content",
		lines: func() []string {
			tr := fresh()
			l := tr.lines()
			tr.events[8]["status"] = 403
			return insertLine(l, 11, tr.line(8))
		},
		line: 12, chain: chain, seq: 8, problem: "seq 8 altered: hash does not match content (a changed copy of line 9)",
	}, {
		name: "two copies with different hashes",
		lines: func() []string {
			tr := fresh()
			l := tr.lines()
			tr.events[8]["status"] = 403
			tr.seal(8)
			return insertLine(l, 11, tr.line(8))
		},
		line: 12, chain: chain, seq: 8, problem: "seq 8 altered: two copies with different content (the other on line 9)",
	}, {
		name: "checkpoint signed by another key",
		lines: func() []string {
			tr := fresh()
			cp := tr.events[6]
			cp["key_id"] = KeyID(otherPub)
			cp["signature"] = sign(otherPriv, chain, 5, tr.hash(5))
			tr.rehash(6, true)
			return tr.lines()
		},
		line: 7, chain: chain, seq: 6,
		problem: fmt.Sprintf("seq 6 checkpoint: signed by another key (key_id %s, the given key is %s)", KeyID(otherPub), KeyID(pub)),
	}, {
		name: "checkpoint signed by another key under this key's id",
		lines: func() []string {
			tr := fresh()
			tr.events[6]["signature"] = sign(otherPriv, chain, 5, tr.hash(5))
			tr.rehash(6, true)
			return tr.lines()
		},
		line: 7, chain: chain, seq: 6, problem: "seq 6 checkpoint: signature does not verify",
	}, {
		name: "signed checkpoint with a wrong last_seq",
		lines: func() []string {
			tr := fresh()
			tr.events[6]["last_seq"] = 4
			tr.events[6]["signature"] = sign(priv, chain, 4, tr.hash(5))
			tr.rehash(6, true)
			return tr.lines()
		},
		line: 7, chain: chain, seq: 6, problem: "seq 6 checkpoint: last_seq is 4, not 5",
	}, {
		name: "signed checkpoint with a wrong last_hash",
		lines: func() []string {
			tr := fresh()
			tr.events[6]["last_hash"] = tr.hash(4)
			tr.events[6]["signature"] = sign(priv, chain, 5, tr.hash(4))
			tr.rehash(6, false)
			return tr.lines()
		},
		line: 7, chain: chain, seq: 6, problem: "seq 6 checkpoint: last_hash is not the hash of seq 5 (line 6)",
	}, {
		name:  "verified with another key",
		key:   otherPub,
		lines: func() []string { return fresh().lines() },
		line:  1, chain: chain, seq: 0,
		problem: fmt.Sprintf("the chain was started for key %s, not the given key %s", KeyID(pub), KeyID(otherPub)),
	}, {
		name:  "not JSON",
		lines: func() []string { l := fresh().lines(); l[4] = l[4][:40]; return l },
		line:  5, seq: -1, problem: "invalid JSON: ",
	}, {
		name:  "trailing garbage",
		lines: func() []string { l := fresh().lines(); l[4] += "}"; return l },
		line:  5, seq: -1, problem: "invalid JSON: after the JSON value",
	}, {
		name:  "member twice",
		lines: func() []string { l := fresh().lines(); l[4] = `{"status":403,` + l[4][1:]; return l },
		line:  5, seq: -1, problem: `invalid JSON: member "status" appears twice`,
	}, {
		name:  "not an object",
		lines: func() []string { return insertLine(fresh().lines(), 4, `"hello"`) },
		line:  5, seq: -1, problem: "not a JSON object",
	}, {
		name: "unchained event",
		lines: func() []string {
			return insertLine(fresh().lines(), 4, `{"time":"2026-12-01T10:00:00Z","request_id":"r1","status":200}`)
		},
		line: 5, seq: -1, problem: "not part of a chain",
	}, {
		name: "event without hash",
		lines: func() []string {
			tr := fresh()
			delete(tr.events[4], "hash")
			return tr.lines()
		},
		line: 5, problem: `incomplete chain members: no "hash"`, seq: -1,
	}, {
		name:  "truncated, final checkpoint required",
		opt:   VerifyOptions{RequireFinal: true},
		lines: func() []string { return fresh().lines()[:21] },
		line:  21, chain: chain, seq: 20, problem: "no final checkpoint: the trail may be cut after seq 20",
	}, {
		name: "events after the final checkpoint, final checkpoint required",
		opt:  VerifyOptions{RequireFinal: true},
		lines: func() []string {
			tr := fresh()
			tr.request()
			return tr.lines()
		},
		line: 27, chain: chain, seq: 26, problem: "no final checkpoint: the trail may be cut after seq 26",
	}, {
		name:  "cut right after a checkpoint, final checkpoint required",
		opt:   VerifyOptions{RequireFinal: true},
		lines: func() []string { return fresh().lines()[:19] },
		line:  19, chain: chain, seq: 18, problem: "no final checkpoint: the trail may be cut after seq 18",
	}, {
		name:  "seq 0 is a request",
		lines: func() []string { tr := fresh(); delete(tr.events[0], "kind"); tr.rehash(0, true); return tr.lines() },
		line:  1, chain: chain, seq: 0, problem: `seq 0 is not a chain_start event (kind "")`,
	}, {
		name:  "chain_start without key_id",
		lines: func() []string { tr := fresh(); delete(tr.events[0], "key_id"); tr.rehash(0, true); return tr.lines() },
		line:  1, chain: chain, seq: 0, problem: "chain_start has no key_id",
	}, {
		name: "a second chain_start",
		lines: func() []string {
			tr := fresh()
			tr.events[5]["kind"] = KindStart
			tr.rehash(5, true)
			return tr.lines()
		},
		line: 6, chain: chain, seq: 5, problem: "seq 5 is a second chain_start",
	}, {
		name: "checkpoint without signature",
		lines: func() []string {
			tr := fresh()
			delete(tr.events[6], "signature")
			tr.rehash(6, true)
			return tr.lines()
		},
		line: 7, chain: chain, seq: 6, problem: "seq 6 checkpoint has no signature",
	}, {
		name: "checkpoint signature not base64",
		lines: func() []string {
			tr := fresh()
			tr.events[6]["signature"] = "c2ln!"
			tr.rehash(6, true)
			return tr.lines()
		},
		line: 7, chain: chain, seq: 6, problem: "seq 6 checkpoint: signature is not base64",
	}, {
		name:  "checkpoint with a final that is not a boolean",
		lines: func() []string { tr := fresh(); tr.events[6]["final"] = "yes"; tr.rehash(6, true); return tr.lines() },
		line:  7, chain: chain, seq: 6, problem: `seq 6: final "yes" is not true or false`,
	}, {
		name: "chain id not in lowercase",
		lines: func() []string {
			l := fresh().lines()
			l[4] = strings.Replace(l[4], chain, strings.ToUpper(chain), 1)
			return l
		},
		line: 5, seq: -1, problem: `chain "3F9A0C1D2E3F4A5B" is not a string of 16 lowercase hex digits`,
	}, {
		name: "seq not an integer",
		lines: func() []string {
			l := fresh().lines()
			l[5] = strings.Replace(l[5], `"seq":5`, `"seq":5.5`, 1)
			return l
		},
		line: 6, chain: chain, seq: -1, problem: "seq 5.5 is not a non-negative integer",
	}, {
		name: "altered event in an array line",
		lines: func() []string {
			tr := fresh()
			tr.events[7]["status"] = 403
			l := tr.lines()
			batch := "[" + strings.Join(l[4:10], ",") + "]"
			return slices.Concat(l[:4], []string{batch}, l[10:])
		},
		line: 5, index: 4, chain: chain, seq: 7, problem: "seq 7 altered: hash does not match content",
	}, {
		name: "an array line with something else than an event",
		lines: func() []string {
			l := fresh().lines()
			return slices.Concat(l[:4], []string{"[" + l[4] + `,["x"],` + l[5] + "]"}, l[6:])
		},
		line: 5, index: 2, seq: -1, problem: "not a JSON object",
	}, {
		name: "the first problem by line, of two chains",
		lines: func() []string {
			// Chain b's gap (line 4) is only known at the end of the file,
			// after chain a's alteration (line 9).
			a := makeTrail(t, priv, "aaaaaaaaaaaaaaaa", 10, 5, true)
			a.events[4]["status"] = 500
			b := makeTrail(t, priv, "bbbbbbbbbbbbbbbb", 10, 5, true)
			la, lb := a.lines(), deleteLines(b.lines(), 1, 1)
			var l []string
			for i := range la {
				l = append(l, la[i])
				if i < len(lb) {
					l = append(l, lb[i])
				}
			}
			return l
		},
		line: 4, chain: "bbbbbbbbbbbbbbbb", seq: 1, problem: "seq 1 missing (line 4 has seq 2)",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := pub
			if c.key != nil {
				key = c.key
			}
			rep, err := verifyLines(c.lines(), key, c.opt)
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify: %v, report %+v; want a *VerifyError", err, rep)
			}
			t.Log(ve)
			if rep != nil {
				t.Errorf("report %+v with an error", rep)
			}
			if ve.Line != c.line || ve.Index != c.index || ve.Chain != c.chain || ve.Seq != c.seq || !strings.Contains(ve.Problem, c.problem) {
				t.Errorf("got  %#v\nwant line %d, index %d, chain %q, seq %d, problem containing %q",
					ve, c.line, c.index, c.chain, c.seq, c.problem)
			}
		})
	}
}

// TestVerifyAccepts checks trails that are fine: delivered more than once,
// out of order (with AnyOrder), cut, mixed from several chains, batched.
func TestVerifyAccepts(t *testing.T) {
	pub, priv := newKey(t)
	const chain = "3f9a0c1d2e3f4a5b"
	fresh := func() *trail { return makeTrail(t, priv, chain, 20, 5, true) }
	full := ChainReport{ID: chain, Node: "gw-1", Events: 26, LastSeq: 25, Checkpoints: 5, SignedThrough: 24, Final: true}

	cases := []struct {
		name   string
		opt    VerifyOptions
		lines  func() []string
		chains []ChainReport
		dups   int
		unch   int
	}{{
		name:   "swapped lines, any order",
		opt:    VerifyOptions{AnyOrder: true},
		lines:  func() []string { l := fresh().lines(); l[8], l[9] = l[9], l[8]; return l },
		chains: []ChainReport{full},
	}, {
		name:   "reversed, any order",
		opt:    VerifyOptions{AnyOrder: true, RequireFinal: true},
		lines:  func() []string { l := fresh().lines(); slices.Reverse(l); return l },
		chains: []ChainReport{full},
	}, {
		name:   "duplicated line",
		lines:  func() []string { l := fresh().lines(); return insertLine(l, 11, l[8]) },
		chains: []ChainReport{full}, dups: 1,
	}, {
		name:   "duplicated batch and checkpoint",
		lines:  func() []string { l := fresh().lines(); return insertLine(l, 13, l[4:13]...) },
		chains: []ChainReport{full}, dups: 9,
	}, {
		name:   "duplicated line, any order",
		opt:    VerifyOptions{AnyOrder: true},
		lines:  func() []string { l := fresh().lines(); return insertLine(l, 2, l[8], l[25]) },
		chains: []ChainReport{full}, dups: 2,
	}, {
		name:  "truncated after a checkpoint and three events",
		lines: func() []string { return fresh().lines()[:16] },
		chains: []ChainReport{{ID: chain, Node: "gw-1", Events: 16, LastSeq: 15, Checkpoints: 2,
			SignedThrough: 11, Unsigned: 3}},
	}, {
		name:  "cut right after a checkpoint",
		lines: func() []string { return fresh().lines()[:19] },
		chains: []ChainReport{{ID: chain, Node: "gw-1", Events: 19, LastSeq: 18, Checkpoints: 3,
			SignedThrough: 17}},
	}, {
		name:   "a byte order mark",
		lines:  func() []string { l := fresh().lines(); l[0] = "\ufeff" + l[0]; return l },
		chains: []ChainReport{full},
	}, {
		name:  "no checkpoint yet",
		lines: func() []string { return fresh().lines()[:4] },
		chains: []ChainReport{{ID: chain, Node: "gw-1", Events: 4, LastSeq: 3, SignedThrough: -1,
			Unsigned: 4}},
	}, {
		name: "an event after the final checkpoint",
		lines: func() []string {
			tr := fresh()
			tr.request()
			return tr.lines()
		},
		chains: []ChainReport{{ID: chain, Node: "gw-1", Events: 27, LastSeq: 26, Checkpoints: 5,
			SignedThrough: 24, Unsigned: 1}},
	}, {
		name: "two interleaved chains",
		opt:  VerifyOptions{RequireFinal: true},
		lines: func() []string {
			a := makeTrail(t, priv, "bbbbbbbbbbbbbbbb", 10, 4, true).lines()
			b := makeTrail(t, priv, "aaaaaaaaaaaaaaaa", 3, 4, true).lines()
			l := slices.Clone(a[:3])
			for i := range b {
				l = append(l, b[i], a[3+i])
			}
			return append(l, a[3+len(b):]...)
		},
		chains: []ChainReport{
			{ID: "bbbbbbbbbbbbbbbb", Node: "gw-1", Events: 14, LastSeq: 13, Checkpoints: 3, SignedThrough: 12, Final: true},
			{ID: "aaaaaaaaaaaaaaaa", Node: "gw-1", Events: 5, LastSeq: 4, Checkpoints: 1, SignedThrough: 3, Final: true},
		},
	}, {
		name: "a file appended across restarts",
		lines: func() []string {
			return slices.Concat(makeTrail(t, priv, "0000000000000001", 3, 5, true).lines(),
				makeTrail(t, priv, "0000000000000002", 2, 5, false).lines())
		},
		chains: []ChainReport{
			{ID: "0000000000000001", Node: "gw-1", Events: 5, LastSeq: 4, Checkpoints: 1, SignedThrough: 3, Final: true},
			{ID: "0000000000000002", Node: "gw-1", Events: 3, LastSeq: 2, SignedThrough: -1, Unsigned: 3},
		},
	}, {
		name: "unchained events allowed",
		opt:  VerifyOptions{AllowUnchained: true},
		lines: func() []string {
			return insertLine(fresh().lines(), 4, `{"time":"2026-12-01T10:00:00Z","request_id":"r1","status":200}`, `{}`)
		},
		chains: []ChainReport{full}, unch: 2,
	}, {
		name: "JSON array lines",
		lines: func() []string {
			l := fresh().lines()
			var out []string
			for i := 0; i < len(l); i += 4 {
				out = append(out, "["+strings.Join(l[i:min(i+4, len(l))], ",")+"]")
			}
			return append(out, "[]")
		},
		chains: []ChainReport{full},
	}, {
		name: "blank lines, CRLF, other member order and spelling",
		lines: func() []string {
			var out []string
			for _, s := range fresh().lines() {
				out = append(out, respell(t, s)+"\r", "", "  \t")
			}
			return out
		},
		chains: []ChainReport{full},
	}, {
		name: "a long line",
		lines: func() []string {
			tr := newTrail(t, priv, chain)
			tr.request()
			tr.events[1]["extra"] = map[string]string{"body": strings.Repeat("x\"€\n", 700_000)}
			tr.seal(1)
			tr.request()
			tr.checkpoint(true)
			return tr.lines()
		},
		chains: []ChainReport{{ID: chain, Node: "gw-1", Events: 4, LastSeq: 3, Checkpoints: 1, SignedThrough: 2, Final: true}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, err := verifyLines(c.lines(), pub, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rep.Chains, c.chains) || rep.Duplicates != c.dups || rep.Unchained != c.unch {
				t.Errorf("report %+v\nwant chains %+v, %d duplicates, %d unchained", rep, c.chains, c.dups, c.unch)
			}
		})
	}
}

// respell writes an event's members in reverse order with spaces, numbers
// in exponent form and escaped characters: the same JSON value, other
// bytes.
func respell(t *testing.T, line string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(m))
	slices.Reverse(keys)
	var b strings.Builder
	b.WriteString("{ ")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ,\t")
		}
		v := string(m[k])
		switch k {
		case "seq", "status":
			v += ".000e0"
		case "node", "route":
			v = strings.ReplaceAll(v, "-", `\u002D`)
			v = strings.ReplaceAll(v, "r", `\u0072`)
		}
		fmt.Fprintf(&b, "%q : %s", k, v)
	}
	b.WriteString(" }")
	return b.String()
}

func TestVerifyErrorString(t *testing.T) {
	for _, c := range []struct {
		err  VerifyError
		want string
	}{
		{VerifyError{Line: 41, Chain: "3f9a0c1d2e3f4a5b", Seq: 40, Problem: "seq 40 missing (line 41 has seq 41)"},
			"line 41: chain 3f9a0c1d2e3f4a5b: seq 40 missing (line 41 has seq 41)"},
		{VerifyError{Line: 7, Seq: -1, Problem: "not part of a chain (no chain, seq and hash members)"},
			"line 7: not part of a chain (no chain, seq and hash members)"},
		{VerifyError{Line: 3, Index: 2, Chain: "3f9a0c1d2e3f4a5b", Seq: 9, Problem: "seq 9 altered: hash does not match content"},
			"line 3 (event 2 of the array): chain 3f9a0c1d2e3f4a5b: seq 9 altered: hash does not match content"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q\nwant      %q", got, c.want)
		}
	}
}

func TestVerifyBadKey(t *testing.T) {
	if _, err := Verify(strings.NewReader(""), ed25519.PublicKey("short"), VerifyOptions{}); err == nil {
		t.Fatal("a 5-byte key must be refused")
	}
}

// TestVerifyParts checks a trail rotated into files: read as one, lines
// counted per file, positions naming the file.
func TestVerifyParts(t *testing.T) {
	pub, priv := newKey(t)
	l := makeTrail(t, priv, "3f9a0c1d2e3f4a5b", 20, 5, true).lines()
	parts := func(a, b []string) []Part {
		return []Part{
			{Name: "audit-1.jsonl", R: strings.NewReader(strings.Join(a, "\n"))}, // no final newline
			{Name: "audit-2.jsonl", R: strings.NewReader(strings.Join(b, "\n") + "\n")},
		}
	}
	rep, err := VerifyParts(parts(l[:10], l[10:]), pub, VerifyOptions{RequireFinal: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Chains) != 1 || rep.Chains[0].Events != 26 || !rep.Chains[0].Final {
		t.Fatalf("report %+v", rep)
	}

	// Seq 9 (the first file's last line) moved to the second file's third.
	_, err = VerifyParts(parts(l[:9], insertLine(l[10:], 2, l[9])), pub, VerifyOptions{})
	want := "audit-2.jsonl: line 3: chain 3f9a0c1d2e3f4a5b: seq 9 reordered: it comes after seq 11 (line 2)"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	// The second file without its first line.
	_, err = VerifyParts(parts(l[:10], l[11:]), pub, VerifyOptions{})
	want = "audit-2.jsonl: line 1: chain 3f9a0c1d2e3f4a5b: seq 10 missing (line 1 has seq 11)"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	// A copy in the second file of an event of the first, changed.
	tr := makeTrail(t, priv, "3f9a0c1d2e3f4a5b", 20, 5, true)
	tr.events[3]["status"] = 500
	tr.seal(3)
	_, err = VerifyParts(parts(l[:10], insertLine(l[10:], 1, tr.line(3))), pub, VerifyOptions{})
	want = "audit-2.jsonl: line 2: chain 3f9a0c1d2e3f4a5b: seq 3 altered: two copies with different content (the other on line 4 of audit-1.jsonl)"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

func TestMembers(t *testing.T) {
	canon, err := Canonical([]byte(`{"f":{},"a\"b":1,"c":[1,{"d":"}],\\"}],"e":"x,y\"","\n":null,"g":[[],{"h":[{}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	keys, vals := members(canon)
	var got []string
	for i := range keys {
		got = append(got, keys[i]+"="+string(vals[i]))
	}
	want := []string{"\n=null", `a"b=1`, `c=[1,{"d":"}],\\"}]`, `e="x,y\""`, "f={}", `g=[[],{"h":[{}]}]`}
	if !slices.Equal(got, want) {
		t.Errorf("members(%s)\n = %q\nwant %q", canon, got, want)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestVerifyReadError(t *testing.T) {
	pub, _ := newKey(t)
	_, err := Verify(failingReader{}, pub, VerifyOptions{})
	var ve *VerifyError
	if err == nil || errors.As(err, &ve) || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("got %v, want the read error", err)
	}
}

func BenchmarkVerify(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	tr := makeTrail(b, priv, "3f9a0c1d2e3f4a5b", 10000, 1000, true)
	data := []byte(strings.Join(tr.lines(), "\n") + "\n")
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if _, err := Verify(bytes.NewReader(data), pub, VerifyOptions{RequireFinal: true}); err != nil {
			b.Fatal(err)
		}
	}
}
