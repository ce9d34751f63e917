package caddyaudit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/apigate/gateway/caddyaudit/auditchain"
)

// Notices are audit events that no request caused: actions the gateway
// took by itself, such as the docker app rolling a canary release back
// (kind "canary_rollback") or completing one ("canary_promoted"). They go
// to the same sinks, queues, spool and chain as request events. Their JSON
// has "kind", "request_id" (the notice's id), "time" and the notice's own
// members at the top level (plus "chain", "seq" and "hash" with a chain):
//
//	{"canary_version":"v2","error_rate":100,"kind":"canary_rollback",
//	 "request_id":"canary_rollback-3f2a…","service":"orders",...,"time":"..."}

// reservedNoticeMembers are the members every notice has.
var reservedNoticeMembers = map[string]bool{"kind": true, "request_id": true, "time": true, "chain": true, "seq": true, "hash": true}

// RecordNotice records an audit event that no request caused. kind names
// what happened (lowercase letters and '_', not a chain event's kind); id
// identifies the notice (consumers deduplicate on request_id); fields are
// its members: names of lowercase letters, digits and '_' other than the
// common ones, values strings, booleans, numbers or lists of strings. It
// returns an error for a notice it cannot record as asked, or when the
// audit app did not start.
func (a *App) RecordNotice(kind, id string, at time.Time, fields map[string]any) error {
	if err := checkNotice(kind, fields); err != nil {
		return err
	}
	if fields == nil {
		fields = map[string]any{} // (a nil Notice is not a notice)
	}
	ev := &Event{Kind: kind, RequestID: id, Time: at, Notice: fields}
	remember(ev)
	if !a.started() {
		if err := a.start(); err != nil {
			return fmt.Errorf("audit app did not start: %w", err)
		}
	}
	if a.chain != nil {
		a.chain.record(ev, a.workers)
		return nil
	}
	for _, w := range a.workers {
		w.Enqueue(ev)
	}
	return nil
}

func checkNotice(kind string, fields map[string]any) error {
	if !noticeName(kind) || kind == auditchain.KindStart || kind == auditchain.KindCheckpoint {
		return fmt.Errorf("audit notice: invalid kind %q", kind)
	}
	for k, v := range fields {
		if !noticeName(k) || reservedNoticeMembers[k] {
			return fmt.Errorf("audit notice %s: invalid member name %q", kind, k)
		}
		switch v.(type) {
		case string, bool, int, int64, uint64, float64, []string:
		default:
			return fmt.Errorf("audit notice %s: member %s is a %T (strings, booleans, numbers and lists of strings only)", kind, k, v)
		}
	}
	return nil
}

func noticeName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// appendNotice appends a notice in canonical form.
func (e *Event) appendNotice(buf []byte) []byte {
	m := make(map[string]any, len(e.Notice)+6)
	for k, v := range e.Notice {
		m[k] = v
	}
	m["kind"] = e.Kind
	m["request_id"] = e.RequestID
	m["time"] = e.Time.UTC().Format(time.RFC3339Nano)
	if e.Chain != "" {
		m["chain"], m["seq"] = e.Chain, e.Seq
	}
	if e.Hash != "" {
		m["hash"] = e.Hash
	}
	raw, err := json.Marshal(m)
	if err == nil {
		var c []byte
		if c, err = auditchain.Canonical(raw); err == nil {
			return append(buf, c...)
		}
	}
	// checkNotice lets only encodable values through
	return append(buf, fmt.Sprintf(`{"kind":%q,"request_id":%q,"error":%q}`, e.Kind, e.RequestID, err.Error())...)
}
