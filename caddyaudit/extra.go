package caddyaudit

import (
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strings"

	"github.com/apigate/gateway/identity"
)

// Include names one request value to record under the event's "extra".
type Include struct {
	// Name is the header name (a trailing * matches every header that
	// starts with the rest), the claim path (such as tenant or
	// org.id), or the query parameter.
	Name string `json:"name"`
	// Key is the member of "extra" that holds the value. Default: Name as
	// written; for a header pattern, each matching header's canonical name.
	Key string `json:"key,omitempty"`
}

// alwaysRedacted are request headers whose values are never recorded.
var alwaysRedacted = []string{"Authorization", "Cookie", "Proxy-Authorization"}

const (
	// maxExtraValue bounds one recorded value; a longer one is cut and
	// ends with truncatedMark.
	maxExtraValue = 4096
	truncatedMark = "...(truncated)"
	// maxPatternHeaders bounds the headers one pattern records.
	maxPatternHeaders = 32
	maxExtraKey       = 128
)

// extraSpec is the handler's provisioned include/redact configuration.
type extraSpec struct {
	headers  []headerInclude
	claims   []claimInclude
	query    []Include
	redacted map[string]bool // canonical header names
}

type headerInclude struct {
	canon  string // canonical name, or the prefix of a pattern
	prefix bool
	key    string
}

type claimInclude struct {
	path identity.ClaimPath
	key  string
}

func (s *extraSpec) empty() bool {
	return s == nil || len(s.headers)+len(s.claims)+len(s.query) == 0
}

// provisionExtra checks the include and redact options and prepares them.
func (h *Handler) provisionExtra() (*extraSpec, error) {
	s := &extraSpec{redacted: map[string]bool{}}
	for _, n := range alwaysRedacted {
		s.redacted[n] = true
	}
	for _, n := range h.RedactHeaders {
		if n == "" || strings.ContainsAny(n, " \t:*") {
			return nil, fmt.Errorf("redact_header %q: not a header name", n)
		}
		s.redacted[textproto.CanonicalMIMEHeaderKey(n)] = true
	}
	keys := map[string]string{}
	useKey := func(kind string, inc Include) (string, error) {
		k := inc.Key
		if k == "" {
			k = inc.Name
		}
		if err := checkExtraKey(k); err != nil {
			return "", fmt.Errorf("%s %q: %w", kind, inc.Name, err)
		}
		if prev, dup := keys[k]; dup {
			return "", fmt.Errorf("%s %q: extra key %q is already used by %s; give one of them another key (second argument)", kind, inc.Name, k, prev)
		}
		keys[k] = kind + " " + inc.Name
		return k, nil
	}
	for _, inc := range h.IncludeHeaders {
		name := inc.Name
		if name == "" || strings.ContainsAny(name, " \t:") || strings.Contains(strings.TrimSuffix(name, "*"), "*") {
			return nil, fmt.Errorf("include_header %q: not a header name (a trailing * matches a prefix)", name)
		}
		if p, ok := strings.CutSuffix(name, "*"); ok {
			if inc.Key != "" {
				return nil, fmt.Errorf("include_header %q: a pattern records each header under its own name; it takes no key", name)
			}
			s.headers = append(s.headers, headerInclude{canon: textproto.CanonicalMIMEHeaderKey(p), prefix: true})
			continue
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if s.redacted[canon] {
			return nil, fmt.Errorf("include_header %q: the values of %s are never recorded (redacted)", name, canon)
		}
		k, err := useKey("include_header", inc)
		if err != nil {
			return nil, err
		}
		s.headers = append(s.headers, headerInclude{canon: canon, key: k})
	}
	for _, inc := range h.IncludeClaims {
		p, err := identity.ParseClaimPath(inc.Name)
		if err != nil {
			return nil, fmt.Errorf("include_claim %q: %w", inc.Name, err)
		}
		k, err := useKey("include_claim", inc)
		if err != nil {
			return nil, err
		}
		s.claims = append(s.claims, claimInclude{path: p, key: k})
	}
	for _, inc := range h.IncludeQuery {
		if inc.Name == "" {
			return nil, fmt.Errorf("include_query: empty parameter name")
		}
		k, err := useKey("include_query", inc)
		if err != nil {
			return nil, err
		}
		s.query = append(s.query, Include{Name: inc.Name, Key: k})
	}
	return s, nil
}

// checkExtraKey allows printable ASCII keys (so that sorting them by bytes
// is the canonical JSON order).
func checkExtraKey(k string) error {
	if k == "" || len(k) > maxExtraKey {
		return fmt.Errorf("extra key must have 1 to %d characters", maxExtraKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Errorf("extra key %q: only printable ASCII without spaces", k)
		}
	}
	return nil
}

// fromRequest collects the header and query values as the client sent
// them (before handlers further down rewrite the request).
func (s *extraSpec) fromRequest(r *http.Request) Fields {
	var f Fields
	for _, hi := range s.headers {
		if !hi.prefix {
			if vs := r.Header[hi.canon]; len(vs) > 0 {
				f = append(f, Field{hi.key, clip(strings.Join(vs, ", "))})
			}
			continue
		}
		n := 0
		for name, vs := range r.Header {
			if !strings.HasPrefix(name, hi.canon) || s.redacted[name] || n >= maxPatternHeaders {
				continue
			}
			if checkExtraKey(name) != nil || f.has(name) {
				continue
			}
			n++
			f = append(f, Field{name, clip(strings.Join(vs, ", "))})
		}
	}
	if len(s.query) > 0 {
		q := r.URL.Query()
		for _, qi := range s.query {
			if vs, ok := q[qi.Name]; ok {
				f = append(f, Field{qi.Key, clip(strings.Join(vs, ","))})
			}
		}
	}
	return f
}

// addClaims adds the claim values of the request's verified identity.
func (s *extraSpec) addClaims(f Fields, r *http.Request) Fields {
	if len(s.claims) == 0 {
		return f
	}
	id, ok := identity.FromRequest(r)
	if !ok {
		return f
	}
	for _, ci := range s.claims {
		if v, ok := ci.path.Lookup(id.Claims); ok {
			f = append(f, Field{ci.key, clip(identity.Stringify(v))})
		}
	}
	return f
}

func (f Fields) has(key string) bool {
	_, ok := f.Get(key)
	return ok
}

// sorted sorts f by key and keeps the first of fields with the same key
// (a header pattern can match a name another option records).
func (f Fields) sorted() Fields {
	slices.SortStableFunc(f, func(a, b Field) int { return strings.Compare(a.Key, b.Key) })
	return slices.CompactFunc(f, func(a, b Field) bool { return a.Key == b.Key })
}

func clip(v string) string {
	if len(v) <= maxExtraValue {
		return v
	}
	cut := maxExtraValue - len(truncatedMark)
	for cut > 0 && v[cut]&0xc0 == 0x80 { // not inside a UTF-8 sequence
		cut--
	}
	return v[:cut] + truncatedMark
}
