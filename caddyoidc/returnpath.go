package caddyoidc

import "net/url"

// maxReturnPath bounds the path a login returns to (it travels in the
// pending-login cookie).
const maxReturnPath = 2048

// SafeReturnPath returns p when it is a path on this site to return to
// after a login, else "/". Browsers read a Location that is not a plain
// absolute path in surprising ways, so only this form passes: it starts
// with exactly one "/", holds no backslash, no control byte, no space and
// no scheme, and its percent-decoded forms (once, and twice) still start
// with one "/" and hold no backslash or control byte. So
// "//evil.example/x", "/\evil.example", "https://evil.example",
// "/%2F%2Fevil.example", "/%5Cevil.example" and "\t//evil" all give "/".
func SafeReturnPath(p string) string {
	if len(p) > maxReturnPath || !plainPath(p, true) {
		return "/"
	}
	cur := p
	for range 2 { // decoded once, decoded twice
		dec, err := url.PathUnescape(cur)
		if err != nil {
			return "/"
		}
		if dec == cur {
			break
		}
		if !plainPath(dec, false) {
			return "/"
		}
		cur = dec
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return "/"
	}
	return p
}

// plainPath: one leading "/", then no "/" or "\" right after it, no
// backslash or control byte anywhere; raw (as sent): no space or
// non-ASCII byte either (a browser may map some to "/" or "\").
func plainPath(p string, raw bool) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	if len(p) > 1 && (p[1] == '/' || p[1] == '\\') {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < ' ' || c == 0x7f || c == '\\' || raw && (c == ' ' || c >= 0x80) {
			return false
		}
	}
	return true
}
