package caddyaudit

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apigate/gateway/caddyaudit/auditchain"
	"github.com/apigate/gateway/identity"
)

// Event is one audit record: what one request did through the gateway.
// The JSON form (AppendJSON, and the json tags for decoding) is the public
// format sent to every sink.
type Event struct {
	// Time is when the request arrived.
	Time time.Time `json:"time"`
	// RequestID identifies the request: the gateway's own id, Caddy's
	// {http.request.uuid}, never a value the client sent. Consumers
	// deduplicate on it (delivery is at least once).
	RequestID string `json:"request_id"`
	// ClientRequestID is the value of the handler's request_id_header as
	// the client (or a proxy in front) sent it, for correlation; absent
	// when the header is not configured or not sent. It is recorded, never
	// trusted: nothing deduplicates on it.
	ClientRequestID string `json:"client_request_id,omitempty"`
	// Route is the name given to the audit handler, if any.
	Route string `json:"route"`
	// Method, Host and Path are the request's.
	Method string `json:"method"`
	Host   string `json:"host"`
	Path   string `json:"path"`
	// Status is the response status (from the error when a handler failed).
	Status int `json:"status"`
	// DurationMS is how long the request took, in milliseconds.
	DurationMS float64 `json:"duration_ms"`
	// RemoteIP is the client's address (Caddy's client IP, which honours
	// trusted_proxies).
	RemoteIP string `json:"remote_ip"`
	// Subject is the verified token's subject, if any.
	Subject string `json:"subject"`
	// Roles are the identity's roles as rbac saw them, if any.
	Roles []string `json:"roles"`
	// Decision is "allow", "deny", or "would_deny" (a duty in dry run
	// would have denied the request and let it pass).
	Decision string `json:"decision"`
	// Reason is why the request was (or, for would_deny, would have
	// been) denied; empty when allowed.
	Reason string `json:"reason"`
	// DecidedBy names the duty and rule that decided: "<module>" or
	// "<module>: <rule in the module's config terms>", e.g.
	// "rbac: require any admin,editor" (see docs/caddyaudit.md). Absent
	// when no duty recorded a decision.
	DecidedBy string `json:"decided_by,omitempty"`
	// OpenAPIViolation is the first way the request (or its response)
	// did not match the API's OpenAPI document, as the openapi duty found
	// it (refused, or let pass in dry run): location, keyword, message.
	// Absent when there was none.
	OpenAPIViolation *identity.OpenAPIViolation `json:"openapi_violation,omitempty"`
	// PermissionCache is where the permission duty's answer came from:
	// "hit", "miss" or "stale". Absent when no permission duty ran.
	PermissionCache string `json:"permission_cache,omitempty"`
	// Plan is the quota plan the request was counted on; absent when no
	// quota duty ran.
	Plan string `json:"plan,omitempty"`
	// Auth is how the client proved its identity ("jwt", "api_key",
	// "client_cert", "oidc_session"); absent without an identity.
	Auth string `json:"auth,omitempty"`
	// AuthSource says where the identity came from when it is not a
	// credential the request carried itself: "oidc_session" (a browser
	// session of oidc_login). Absent otherwise.
	AuthSource string `json:"auth_source,omitempty"`
	// CredentialID names the credential (an API key's id, a client
	// certificate's fingerprint); absent when the identity has none.
	CredentialID string `json:"credential_id,omitempty"`
	// BytesOut is the number of response body bytes written.
	BytesOut int64 `json:"bytes_out"`
	// Extra holds the values the handler's include_header, include_claim
	// and include_query options picked, by key (absent when none).
	Extra Fields `json:"extra,omitempty"`

	// With a chain configured (audit { chain <key> }): the chain's id, the
	// event's position in it and its hash (see package auditchain).
	Chain string `json:"chain,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
	Hash  string `json:"hash,omitempty"`

	// Kind is empty for request events; "chain_start" and "checkpoint"
	// events belong to the chain and carry the fields below instead of the
	// request's; other kinds are notices (Notice).
	Kind string `json:"kind,omitempty"`
	// Node is the gateway that recorded the event (the audit app's node:
	// its host name unless configured), on request events as on
	// chain_start.
	Node      string `json:"node,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
	LastSeq   uint64 `json:"last_seq,omitempty"`
	LastHash  string `json:"last_hash,omitempty"`
	Signature string `json:"signature,omitempty"`
	Final     bool   `json:"final,omitempty"`

	// Notice holds the members of a notice: an event no request caused
	// (App.RecordNotice), whose Kind names it. In the sinks' JSON the
	// members are at the top level, beside kind, request_id and time.
	Notice map[string]any `json:"-"`
}

// Field is one extra value of an event.
type Field struct{ Key, Value string }

// Fields are an event's extra values; in JSON, an object.
type Fields []Field

// MarshalJSON encodes the fields as a JSON object.
func (f Fields) MarshalJSON() ([]byte, error) { return appendFields(nil, f), nil }

// UnmarshalJSON decodes a JSON object of strings, in key order.
func (f *Fields) UnmarshalJSON(b []byte) error {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("extra: %w", err)
	}
	*f = (*f)[:0]
	for k, v := range m {
		*f = append(*f, Field{k, v})
	}
	slices.SortFunc(*f, func(a, b Field) int { return strings.Compare(a.Key, b.Key) })
	return nil
}

// Get returns the value of key.
func (f Fields) Get(key string) (string, bool) {
	for _, x := range f {
		if x.Key == key {
			return x.Value, true
		}
	}
	return "", false
}

func appendFields(buf []byte, f Fields) []byte {
	if !slices.IsSortedFunc(f, func(a, b Field) int { return strings.Compare(a.Key, b.Key) }) {
		f = slices.Clone(f)
		slices.SortStableFunc(f, func(a, b Field) int { return strings.Compare(a.Key, b.Key) })
	}
	buf = append(buf, '{')
	for i, x := range f {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = auditchain.AppendString(buf, x.Key)
		buf = append(buf, ':')
		buf = auditchain.AppendString(buf, x.Value)
	}
	return append(buf, '}')
}

// AppendJSON appends the event as one JSON object in canonical form
// (RFC 8785: members sorted by name, so that the bytes are what a chain's
// hash covers). It allocates nothing when buf has room.
func (e *Event) AppendJSON(buf []byte) []byte {
	if e.Notice != nil {
		return e.appendNotice(buf)
	}
	if e.Kind != "" {
		return e.appendChainEvent(buf)
	}
	buf = append(buf, '{')
	if e.Auth != "" {
		buf = append(buf, `"auth":`...)
		buf = auditchain.AppendString(buf, e.Auth)
		buf = append(buf, ',')
	}
	if e.AuthSource != "" {
		buf = append(buf, `"auth_source":`...)
		buf = auditchain.AppendString(buf, e.AuthSource)
		buf = append(buf, ',')
	}
	buf = append(buf, `"bytes_out":`...)
	buf = strconv.AppendInt(buf, e.BytesOut, 10)
	if e.Chain != "" {
		buf = append(buf, `,"chain":`...)
		buf = auditchain.AppendString(buf, e.Chain)
	}
	if e.ClientRequestID != "" {
		buf = append(buf, `,"client_request_id":`...)
		buf = auditchain.AppendString(buf, e.ClientRequestID)
	}
	if e.CredentialID != "" {
		buf = append(buf, `,"credential_id":`...)
		buf = auditchain.AppendString(buf, e.CredentialID)
	}
	if e.DecidedBy != "" {
		buf = append(buf, `,"decided_by":`...)
		buf = auditchain.AppendString(buf, e.DecidedBy)
	}
	buf = append(buf, `,"decision":`...)
	buf = auditchain.AppendString(buf, e.Decision)
	buf = append(buf, `,"duration_ms":`...)
	buf = auditchain.AppendNumber(buf, e.DurationMS)
	if len(e.Extra) > 0 {
		buf = append(buf, `,"extra":`...)
		buf = appendFields(buf, e.Extra)
	}
	if e.Hash != "" {
		buf = append(buf, `,"hash":`...)
		buf = auditchain.AppendString(buf, e.Hash)
	}
	buf = append(buf, `,"host":`...)
	buf = auditchain.AppendString(buf, e.Host)
	buf = append(buf, `,"method":`...)
	buf = auditchain.AppendString(buf, e.Method)
	if e.Node != "" {
		buf = append(buf, `,"node":`...)
		buf = auditchain.AppendString(buf, e.Node)
	}
	if v := e.OpenAPIViolation; v != nil {
		buf = append(buf, `,"openapi_violation":{"keyword":`...)
		buf = auditchain.AppendString(buf, v.Keyword)
		buf = append(buf, `,"location":`...)
		buf = auditchain.AppendString(buf, v.Location)
		buf = append(buf, `,"message":`...)
		buf = auditchain.AppendString(buf, v.Message)
		buf = append(buf, '}')
	}
	buf = append(buf, `,"path":`...)
	buf = auditchain.AppendString(buf, e.Path)
	if e.PermissionCache != "" {
		buf = append(buf, `,"permission_cache":`...)
		buf = auditchain.AppendString(buf, e.PermissionCache)
	}
	if e.Plan != "" {
		buf = append(buf, `,"plan":`...)
		buf = auditchain.AppendString(buf, e.Plan)
	}
	buf = append(buf, `,"reason":`...)
	buf = auditchain.AppendString(buf, e.Reason)
	buf = append(buf, `,"remote_ip":`...)
	buf = auditchain.AppendString(buf, e.RemoteIP)
	buf = append(buf, `,"request_id":`...)
	buf = auditchain.AppendString(buf, e.RequestID)
	buf = append(buf, `,"roles":[`...)
	for i, r := range e.Roles {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = auditchain.AppendString(buf, r)
	}
	buf = append(buf, `],"route":`...)
	buf = auditchain.AppendString(buf, e.Route)
	if e.Chain != "" {
		buf = append(buf, `,"seq":`...)
		buf = strconv.AppendUint(buf, e.Seq, 10)
	}
	buf = append(buf, `,"status":`...)
	buf = strconv.AppendInt(buf, int64(e.Status), 10)
	buf = append(buf, `,"subject":`...)
	buf = auditchain.AppendString(buf, e.Subject)
	return e.appendTime(buf)
}

func (e *Event) appendTime(buf []byte) []byte {
	buf = append(buf, `,"time":"`...)
	buf = e.Time.UTC().AppendFormat(buf, time.RFC3339Nano)
	return append(buf, `"}`...)
}

// appendChainEvent encodes a chain_start or checkpoint event.
func (e *Event) appendChainEvent(buf []byte) []byte {
	buf = append(buf, `{"chain":`...)
	buf = auditchain.AppendString(buf, e.Chain)
	if e.Final {
		buf = append(buf, `,"final":true`...)
	}
	if e.Hash != "" {
		buf = append(buf, `,"hash":`...)
		buf = auditchain.AppendString(buf, e.Hash)
	}
	buf = append(buf, `,"key_id":`...)
	buf = auditchain.AppendString(buf, e.KeyID)
	buf = append(buf, `,"kind":`...)
	buf = auditchain.AppendString(buf, e.Kind)
	if e.Kind == auditchain.KindCheckpoint {
		buf = append(buf, `,"last_hash":`...)
		buf = auditchain.AppendString(buf, e.LastHash)
		buf = append(buf, `,"last_seq":`...)
		buf = strconv.AppendUint(buf, e.LastSeq, 10)
	}
	if e.Node != "" {
		buf = append(buf, `,"node":`...)
		buf = auditchain.AppendString(buf, e.Node)
	}
	buf = append(buf, `,"request_id":`...)
	buf = auditchain.AppendString(buf, e.RequestID)
	buf = append(buf, `,"seq":`...)
	buf = strconv.AppendUint(buf, e.Seq, 10)
	if e.Signature != "" {
		buf = append(buf, `,"signature":`...)
		buf = auditchain.AppendString(buf, e.Signature)
	}
	return e.appendTime(buf)
}
