package identity

import (
	"fmt"
	"strings"
)

// The placeholders under http.auth. that a module sets: the identity
// sources' (jwt_auth, api_key, client_cert_auth, oidc_login, and Caddy's
// basic_auth: {http.auth.user.id}, and {http.auth.user.<field>} of its
// account's metadata), and rbac's ({http.auth.rbac.roles}, ...). A
// placeholder under http.auth. that is none of these has no value on any
// request: a typo, such as {http.auth.usr.id}. (The gateway's test
// TestAuthPlaceholdersKnown fails when a module sets one not listed.)
var (
	authPlaceholders = []string{
		"http.auth.user.id",
		"http.auth.api_key.id",
		"http.auth.client_cert.fingerprint",
	}
	authPrefixes = []string{
		"http.auth.jwt.claims.",
		"http.auth.oidc.claims.",
		"http.auth.rbac.",
		"http.auth.user.",
	}
)

// UnknownAuthPlaceholder returns the first placeholder of s (a config
// string such as a quota key, "trial-{http.auth.user.id}") that is under
// http.auth. but that no identity source sets, with the known placeholder
// nearest to it (to suggest), or "" when every placeholder of s may have
// a value. Placeholders outside http.auth. are not judged.
func UnknownAuthPlaceholder(s string) (name, nearest string) {
	for rest := s; ; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			return "", ""
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return "", ""
		}
		p := rest[open+1 : open+end]
		rest = rest[open+end+1:]
		if p = strings.TrimSpace(strings.SplitN(p, ":", 2)[0]); !strings.HasPrefix(p, "http.auth.") || knownAuth(p) {
			continue
		}
		return p, nearestAuth(p)
	}
}

// CheckAuthPlaceholders refuses a config string (field names it: "key")
// with a placeholder under http.auth. that no module sets: it would be
// empty on every request (a quota counting nobody, a cache key that
// forgets the user).
func CheckAuthPlaceholders(field, s string) error {
	if name, nearest := UnknownAuthPlaceholder(s); name != "" {
		return fmt.Errorf("invalid %s %q: no identity source sets {%s} (did you mean %s?)", field, s, name, nearest)
	}
	return nil
}

func knownAuth(p string) bool {
	for _, k := range authPlaceholders {
		if p == k {
			return true
		}
	}
	for _, k := range authPrefixes {
		if strings.HasPrefix(p, k) && len(p) > len(k) {
			return true
		}
	}
	return false
}

// nearestAuth is the known placeholder (or prefix, with <name>) at the
// smallest edit distance from p.
func nearestAuth(p string) string {
	best, bestD := "", -1
	try := func(s, cand, shown string) {
		if d := editDistance(s, cand); bestD < 0 || d < bestD {
			best, bestD = shown, d
		}
	}
	for _, k := range authPlaceholders {
		try(p, k, k)
	}
	for _, k := range authPrefixes {
		// compare with as many of p's segments as the prefix has
		segs := strings.SplitAfterN(p, ".", strings.Count(k, ".")+1)
		head := strings.Join(segs[:min(len(segs), strings.Count(k, "."))], "")
		try(head, k, k+"<name>")
	}
	return "{" + best + "}"
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
