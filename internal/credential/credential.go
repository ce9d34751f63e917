// Package credential finds a credential in a request (a header, with or
// without the Bearer scheme, a cookie, a query parameter) and strips it
// before the request goes upstream. jwt_auth and api_key share it, so both
// read and remove credentials the same, fuzzed way.
package credential

import (
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
)

// SourceKind says where a token is looked for.
type SourceKind uint8

// Token source kinds.
const (
	FromHeader SourceKind = iota + 1
	FromCookie
	FromQuery
)

// TokenSource is one place a token may be: a header, a cookie or a query
// parameter.
type TokenSource struct {
	Kind SourceKind
	Name string
}

// DefaultSources is the token source used when none is configured: the
// Authorization header with the Bearer scheme.
var DefaultSources = []TokenSource{{Kind: FromHeader, Name: "Authorization"}}

// OrderSources returns the sources in the documented lookup order: every
// header (as configured), then every cookie, then every query parameter.
// With no source it returns DefaultSources.
func OrderSources(headers, cookies, query []string) []TokenSource {
	var out []TokenSource
	for _, h := range headers {
		out = append(out, TokenSource{Kind: FromHeader, Name: textproto.CanonicalMIMEHeaderKey(h)})
	}
	for _, c := range cookies {
		out = append(out, TokenSource{Kind: FromCookie, Name: c})
	}
	for _, q := range query {
		out = append(out, TokenSource{Kind: FromQuery, Name: q})
	}
	if len(out) == 0 {
		return DefaultSources
	}
	return out
}

// ExtractToken returns the first token found in r, looking at sources in
// order, and the index of the source it came from (-1 if none). The
// Authorization header must use the Bearer scheme (any case); other
// headers hold the raw token, with an optional "Bearer " prefix. A token
// longer than maxSize is reported with tooLarge, without being copied.
func ExtractToken(r *http.Request, sources []TokenSource, maxSize int) (token string, index int, tooLarge bool) {
	for i, src := range sources {
		var v string
		switch src.Kind {
		case FromHeader:
			v = firstHeader(r.Header, src.Name)
			if v == "" {
				continue
			}
			if t, ok := cutBearer(v); ok {
				v = t
			} else if src.Name == "Authorization" {
				continue // another scheme (Basic, ...) is not a JWT
			}
		case FromCookie:
			v = cookieValue(r.Header, src.Name)
		case FromQuery:
			v = queryValue(r.URL.RawQuery, src.Name)
		}
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if len(v) > maxSize {
			return "", i, true
		}
		return v, i, false
	}
	return "", -1, false
}

func firstHeader(h http.Header, canonical string) string {
	if vs := h[canonical]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// cutBearer strips a case-insensitive "Bearer " scheme.
func cutBearer(v string) (string, bool) {
	const scheme = "bearer"
	if len(v) > len(scheme) && strings.EqualFold(v[:len(scheme)], scheme) && (v[len(scheme)] == ' ' || v[len(scheme)] == '\t') {
		return strings.TrimLeft(v[len(scheme):], " \t"), true
	}
	return "", false
}

// cookieValue finds a cookie without parsing every cookie of the request.
func cookieValue(h http.Header, name string) string {
	for _, line := range h["Cookie"] {
		for len(line) > 0 {
			var part string
			part, line, _ = strings.Cut(line, ";")
			part = strings.TrimSpace(part)
			k, val, ok := strings.Cut(part, "=")
			if !ok || k != name {
				continue
			}
			if len(val) > 1 && val[0] == '"' && val[len(val)-1] == '"' {
				val = val[1 : len(val)-1]
			}
			return val
		}
	}
	return ""
}

// queryValue returns the first value of a query parameter, unescaped.
func queryValue(raw, name string) string {
	for len(raw) > 0 {
		var part string
		part, raw, _ = strings.Cut(raw, "&")
		k, val, _ := strings.Cut(part, "=")
		if !queryKeyIs(k, name) {
			continue
		}
		if strings.ContainsAny(val, "%+") {
			uv, err := url.QueryUnescape(val)
			if err != nil {
				return ""
			}
			return uv
		}
		return val
	}
	return ""
}

// queryKeyIs reports whether the raw query key k names name.
func queryKeyIs(k, name string) bool {
	if k == name {
		return true
	}
	if !strings.ContainsAny(k, "%+") {
		return false
	}
	uk, err := url.QueryUnescape(k)
	return err == nil && uk == name
}

// removeQueryParam drops every raw segment of a query whose key is name,
// reading segments exactly as queryValue does (url.Values would skip the
// segments it cannot parse, such as "at=;", which queryValue still reads),
// and keeps the others byte for byte.
func removeQueryParam(raw, name string) (string, bool) {
	var kept []string
	removed := false
	for rest := raw; len(rest) > 0; {
		var part string
		part, rest, _ = strings.Cut(rest, "&")
		k, _, _ := strings.Cut(part, "=")
		if queryKeyIs(k, name) {
			removed = true
			continue
		}
		kept = append(kept, part)
	}
	return strings.Join(kept, "&"), removed
}

// StripToken removes the credential of every source from r, so that it is
// not forwarded upstream.
func StripToken(r *http.Request, sources []TokenSource) {
	// (StrippedFields names the header fields this may change)
	for _, src := range sources {
		switch src.Kind {
		case FromHeader:
			if src.Name == "Authorization" {
				// only a Bearer credential is ours
				if _, ok := cutBearer(firstHeader(r.Header, src.Name)); !ok {
					continue
				}
			}
			r.Header.Del(src.Name)
		case FromCookie:
			removeCookie(r.Header, src.Name)
		case FromQuery:
			if r.URL.RawQuery == "" {
				continue
			}
			if q, removed := removeQueryParam(r.URL.RawQuery, src.Name); removed {
				r.URL.RawQuery = q
				r.RequestURI = r.URL.RequestURI()
			}
		}
	}
}

// StrippedFields returns the names of the request header fields
// StripToken may change for sources (canonical): the token's header
// fields, and Cookie for a cookie source.
func StrippedFields(sources []TokenSource) []string {
	var names []string
	for _, src := range sources {
		name := ""
		switch src.Kind {
		case FromHeader:
			name = textproto.CanonicalMIMEHeaderKey(src.Name)
		case FromCookie:
			name = "Cookie"
		}
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}

func removeCookie(h http.Header, name string) {
	lines := h["Cookie"]
	if len(lines) == 0 || !hasCookie(lines, name) {
		return // the common case of a request without it: nothing allocated
	}
	var b strings.Builder
	for _, line := range lines {
		for len(line) > 0 {
			var part string
			part, line, _ = strings.Cut(line, ";")
			p := strings.TrimSpace(part)
			if p == "" {
				continue
			}
			if k, _, _ := strings.Cut(p, "="); k == name {
				continue
			}
			if b.Len() > 0 {
				b.WriteString("; ")
			} else {
				b.Grow(len(lines[0]))
			}
			b.WriteString(p)
		}
	}
	if b.Len() == 0 {
		h.Del("Cookie")
		return
	}
	h["Cookie"] = []string{b.String()}
}

// hasCookie reports whether a cookie of that name is among lines.
func hasCookie(lines []string, name string) bool {
	for _, line := range lines {
		for len(line) > 0 {
			var part string
			part, line, _ = strings.Cut(line, ";")
			if k, _, _ := strings.Cut(strings.TrimSpace(part), "="); k == name {
				return true
			}
		}
	}
	return false
}
