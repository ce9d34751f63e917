package caddyaudit

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// Event is one audit record: what one request did through the gateway.
// The JSON form (AppendJSON, and the json tags for decoding) is the public
// format sent to every sink.
type Event struct {
	// Time is when the request arrived.
	Time time.Time `json:"time"`
	// RequestID identifies the request ({http.request.uuid} or a header);
	// consumers deduplicate on it (delivery is at least once).
	RequestID string `json:"request_id"`
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
	// Decision is "allow" or "deny".
	Decision string `json:"decision"`
	// Reason is why the request was denied (empty when allowed).
	Reason string `json:"reason"`
	// BytesOut is the number of response body bytes written.
	BytesOut int64 `json:"bytes_out"`
}

// AppendJSON appends the event as one JSON object. It allocates nothing
// when buf has room.
func (e *Event) AppendJSON(buf []byte) []byte {
	buf = append(buf, `{"time":"`...)
	buf = e.Time.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","request_id":`...)
	buf = appendString(buf, e.RequestID)
	buf = append(buf, `,"route":`...)
	buf = appendString(buf, e.Route)
	buf = append(buf, `,"method":`...)
	buf = appendString(buf, e.Method)
	buf = append(buf, `,"host":`...)
	buf = appendString(buf, e.Host)
	buf = append(buf, `,"path":`...)
	buf = appendString(buf, e.Path)
	buf = append(buf, `,"status":`...)
	buf = strconv.AppendInt(buf, int64(e.Status), 10)
	buf = append(buf, `,"duration_ms":`...)
	buf = strconv.AppendFloat(buf, e.DurationMS, 'f', 3, 64)
	buf = append(buf, `,"remote_ip":`...)
	buf = appendString(buf, e.RemoteIP)
	buf = append(buf, `,"subject":`...)
	buf = appendString(buf, e.Subject)
	buf = append(buf, `,"roles":[`...)
	for i, r := range e.Roles {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, r)
	}
	buf = append(buf, `],"decision":`...)
	buf = appendString(buf, e.Decision)
	buf = append(buf, `,"reason":`...)
	buf = appendString(buf, e.Reason)
	buf = append(buf, `,"bytes_out":`...)
	buf = strconv.AppendInt(buf, e.BytesOut, 10)
	return append(buf, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// as encoding/json does.
func appendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
