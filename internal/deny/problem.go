package deny

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of every refusal the gateway writes.
const ContentType = "application/problem+json"

// TypePrefix starts the type URI of every kind of refusal: the type is
// TypePrefix followed by the kind's code (the problem's `error` member).
const TypePrefix = "urn:apigate:problem:"

// Kind is one kind of refusal the gateway writes.
type Kind struct {
	// Code is the kind's name, the problem's `error` member.
	Code string
	// Status is the status it is answered with.
	Status int
	// Title is the problem's title: the same for every refusal of the kind.
	Title string
	// By names who answers it (for docs/errors.md).
	By string
}

// Type is the kind's type URI.
func (k Kind) Type() string { return TypePrefix + k.Code }

// Kinds are the gateway's kinds of refusal, as docs/errors.md lists them
// (openapi's own kinds, with the types caddyopenapi names, are there too).
var Kinds = []Kind{
	{"unauthorized", 401, "Authentication required", "jwt_auth, api_key, client_cert_auth: no credential; rbac: no identity"},
	{"invalid_token", 401, "Credential not accepted", "jwt_auth, api_key, client_cert_auth"},
	{"forbidden", 403, "Forbidden", "rbac: a role or scope is missing; permission: the service denied"},
	{"permission_unavailable", 503, "Permission service unavailable", "permission, with on_error deny"},
	{"quota_exceeded", 429, "Quota exceeded", "quota"},
	{"quota_unavailable", 503, "Quota counts unavailable", "quota: the counts cannot be kept"},
	{"quota_key_empty", 500, "Quota key resolved empty", "quota: its key placeholder has no value for this request (a config mistake)"},
	{"audit_unavailable", 503, "Audit trail unavailable", "audit, with on_full reject"},
	{"ambiguous_path", 400, "Ambiguous request path", "path_guard"},
	{"no_route", 404, "No route", "docker_routes: no discovered route matches"},
	{"no_healthy_upstream", 503, "No healthy upstream", "docker_routes: no replica of the service may take requests"},
	{"discovery_starting", 503, "Discovery starting", "docker_routes: no container list yet"},
	// the fast path's own answers to a request head it cannot read
	// (fastpath/ writes them; on Caddy's path Go's server answers these)
	{"malformed_request", 400, "Malformed request", "the fast path: a request head it cannot read"},
	{"header_fields_too_large", 431, "Request header fields too large", "the fast path: a request head over the server's limit"},
	{"unsupported_transfer_coding", 501, "Unsupported transfer coding", "the fast path: a transfer coding other than chunked"},
	{"expectation_failed", 417, "Expectation failed", "the fast path: an Expect other than 100-continue"},
}

// KindOf returns the kind named code; a code not in Kinds gets its type
// all the same, and the status's text as its title.
func KindOf(code string, status int) Kind {
	for _, k := range Kinds {
		if k.Code == code {
			return k
		}
	}
	return Kind{Code: code, Status: status, Title: http.StatusText(status)}
}

// Problem is an RFC 9457 problem details object: the body of every
// refusal the gateway writes itself.
type Problem struct {
	// Type identifies the kind of refusal (a URI; TypePrefix + code).
	Type string
	// Title is the kind's short summary.
	Title string
	// Status is the answer's status.
	Status int
	// Detail is this refusal's client-safe reason.
	Detail string
	// Instance identifies this occurrence: the path the request was sent
	// to (Write sets it).
	Instance string
	// Members are the extension members, in this order after the
	// standard ones (error, reason, plan, window, reset, errors, ...).
	Members []Member
}

// Member is an extension member of a problem.
type Member struct {
	Name  string
	Value any
}

// New returns the problem of a refusal of the kind code with status and
// detail; its extension member `error` is code.
func New(status int, code, detail string) *Problem {
	k := KindOf(code, status)
	return &Problem{Type: k.Type(), Title: k.Title, Status: status, Detail: detail,
		Members: []Member{{"error", code}}}
}

// With adds an extension member to p and returns p.
func (p *Problem) With(name string, value any) *Problem {
	p.Members = append(p.Members, Member{name, value})
	return p
}

// JSON is p's body: one line of JSON, ended by a newline. The standard
// members come first (type, title, status, detail, instance), then the
// extension members; nothing is HTML-escaped ("must be <= 100" reads as
// written).
func (p *Problem) JSON() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	member := func(name string, v any) {
		if buf.Len() == 0 {
			buf.WriteByte('{')
		} else {
			buf.WriteByte(',')
		}
		_ = enc.Encode(name)
		buf.Truncate(buf.Len() - 1) // (Encode's newline)
		buf.WriteByte(':')
		if err := enc.Encode(v); err != nil {
			buf.WriteString("null\n") // a value JSON cannot hold: not one of ours
		}
		buf.Truncate(buf.Len() - 1)
	}
	member("type", p.Type)
	member("title", p.Title)
	buf.WriteString(`,"status":` + strconv.Itoa(p.Status))
	member("detail", p.Detail)
	member("instance", p.Instance)
	for _, m := range p.Members {
		member(m.Name, m.Value)
	}
	buf.WriteString("}\n")
	return buf.Bytes()
}
