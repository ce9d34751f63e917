package caddyoidc

import "net/url"

// maxReturnPath bounds the path a login returns to (it travels in the
// pending-login cookie).
const maxReturnPath = 2048

// SafeReturnPath returns p when it is a path on this site to return to
// after a login, else "/". Browsers read a Location that is not a plain
// absolute path in surprising ways, so only this form passes: it starts
// with exactly one "/", holds no backslash, no control byte and no
// scheme, and its percent-decoded form (once, and again) keeps all of
// that. So "//evil.example/x", "/\evil.example", "https://evil.example",
// "/%2F%2Fevil.example", "/%5Cevil.example" and "\t//evil" all give "/".
func SafeReturnPath(p string) string {
	if len(p) > maxReturnPath {
		return "/"
	}
	cur := p
	for range 3 { // as sent, decoded once, decoded twice
		if !plainPath(cur) {
			return "/"
		}
		dec, err := url.PathUnescape(cur)
		if err != nil {
			return "/"
		}
		if dec == cur {
			break
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
// backslash anywhere, no control byte or space, no non-ASCII byte (a
// browser may map some to "/" or "\").
func plainPath(p string) bool {
	if len(p) == 0 || p[0] != '/' {
		return false
	}
	if len(p) > 1 && (p[1] == '/' || p[1] == '\\') {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c <= ' ' || c == 0x7f || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}
