package caddypathguard

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"testing"
)

// rfcBase is the base URI of RFC 3986 5.4's examples.
const rfcBase = "http://a/b/c/d;p?q"

// rfcExamples are RFC 3986 5.4.1 (normal) and 5.4.2 (abnormal): each
// reference and what it resolves to against rfcBase.
var rfcExamples = []struct{ ref, want string }{
	// 5.4.1 Normal Examples
	{"g:h", "g:h"},
	{"g", "http://a/b/c/g"},
	{"./g", "http://a/b/c/g"},
	{"g/", "http://a/b/c/g/"},
	{"/g", "http://a/g"},
	{"//g", "http://g"},
	{"?y", "http://a/b/c/d;p?y"},
	{"g?y", "http://a/b/c/g?y"},
	{"#s", "http://a/b/c/d;p?q#s"},
	{"g#s", "http://a/b/c/g#s"},
	{"g?y#s", "http://a/b/c/g?y#s"},
	{";x", "http://a/b/c/;x"},
	{"g;x", "http://a/b/c/g;x"},
	{"g;x?y#s", "http://a/b/c/g;x?y#s"},
	{"", "http://a/b/c/d;p?q"},
	{".", "http://a/b/c/"},
	{"./", "http://a/b/c/"},
	{"..", "http://a/b/"},
	{"../", "http://a/b/"},
	{"../g", "http://a/b/g"},
	{"../..", "http://a/"},
	{"../../", "http://a/"},
	{"../../g", "http://a/g"},
	// 5.4.2 Abnormal Examples
	{"../../../g", "http://a/g"},
	{"../../../../g", "http://a/g"},
	{"/./g", "http://a/g"},
	{"/../g", "http://a/g"},
	{"g.", "http://a/b/c/g."},
	{".g", "http://a/b/c/.g"},
	{"g..", "http://a/b/c/g.."},
	{"..g", "http://a/b/c/..g"},
	{"./../g", "http://a/b/g"},
	{"./g/.", "http://a/b/c/g/"},
	{"g/./h", "http://a/b/c/g/h"},
	{"g/../h", "http://a/b/c/h"},
	{"g;x=1/./y", "http://a/b/c/g;x=1/y"},
	{"g;x=1/../y", "http://a/b/c/y"},
	{"g?y/./x", "http://a/b/c/g?y/./x"},
	{"g?y/../x", "http://a/b/c/g?y/../x"},
	{"g#s/./x", "http://a/b/c/g#s/./x"},
	{"g#s/../x", "http://a/b/c/g#s/../x"},
	{"http:g", "http:g"}, // the strict parser's answer
}

// TestRemoveDotSegmentsRFC3986: reference resolution as RFC 3986 5.2.2
// writes it, with RemoveDotSegments as its remove_dot_segments, gives
// every result of the RFC's normal and abnormal examples (5.4).
func TestRemoveDotSegmentsRFC3986(t *testing.T) {
	for _, tc := range rfcExamples {
		t.Run(tc.ref, func(t *testing.T) {
			if got := resolve(rfcBase, tc.ref); got != tc.want {
				t.Fatalf("resolve(%q) = %q, want %q", tc.ref, got, tc.want)
			}
		})
	}
}

// resolve is RFC 3986 5.2.2 (strict), with the components of 5.3.
func resolve(base, ref string) string {
	bs, ba, bp, bq, _ := split(base)
	rs, ra, rp, rq, rf := split(ref)
	var ts, ta, tp, tq string
	var hasA, hasQ bool
	switch {
	case rs != "":
		ts, ta, hasA, tp, tq, hasQ = rs, ra.s, ra.ok, RemoveDotSegments(rp), rq.s, rq.ok
	case ra.ok:
		ta, hasA, tp, tq, hasQ = ra.s, true, RemoveDotSegments(rp), rq.s, rq.ok
		ts = bs
	default:
		ta, hasA = ba.s, ba.ok
		switch {
		case rp == "":
			tp = bp
			tq, hasQ = bq.s, bq.ok
			if rq.ok {
				tq, hasQ = rq.s, true
			}
		case strings.HasPrefix(rp, "/"):
			tp, tq, hasQ = RemoveDotSegments(rp), rq.s, rq.ok
		default:
			// 5.2.3 merge
			var merged string
			if ba.ok && bp == "" {
				merged = "/" + rp
			} else {
				merged = bp[:strings.LastIndexByte(bp, '/')+1] + rp
			}
			tp, tq, hasQ = RemoveDotSegments(merged), rq.s, rq.ok
		}
		ts = bs
	}
	// 5.3 recomposition
	out := ts + ":"
	if hasA {
		out += "//" + ta
	}
	out += tp
	if hasQ {
		out += "?" + tq
	}
	if rf.ok {
		out += "#" + rf.s
	}
	return out
}

type part struct {
	s  string
	ok bool
}

// split parses a URI reference into its five components (RFC 3986 B).
func split(u string) (scheme string, auth part, p string, q, f part) {
	if i := strings.IndexByte(u, '#'); i >= 0 {
		u, f = u[:i], part{u[i+1:], true}
	}
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u, q = u[:i], part{u[i+1:], true}
	}
	if i := strings.IndexAny(u, ":/"); i > 0 && u[i] == ':' {
		scheme, u = u[:i], u[i+1:]
	}
	if strings.HasPrefix(u, "//") {
		u = u[2:]
		i := strings.IndexByte(u, '/')
		if i < 0 {
			i = len(u)
		}
		auth, u = part{u[:i], true}, u[i:]
	}
	return scheme, auth, u, q, f
}

// TestRemoveDotSegmentsRFCSteps: the example of RFC 3986 5.2.4 itself and
// a few more input shapes.
func TestRemoveDotSegmentsRFCSteps(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/a/b/c/./../../g", "/a/g"},
		{"mid/content=5/../6", "mid/6"},
		{"/", "/"},
		{"", ""},
		{"/..", "/"},
		{"/.", "/"},
		{"/a/..", "/"},
		{"/a/b/..", "/a/"},
		{"/a/./b/", "/a/b/"},
		{"/a/.../b", "/a/.../b"}, // "..." is no dot segment to the RFC
		{"/api/v1.2/x", "/api/v1.2/x"},
	} {
		if got := RemoveDotSegments(tc.in); got != tc.want {
			t.Errorf("RemoveDotSegments(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// checkCases: escaped paths (as an upstream receives them) and what
// reject mode answers; "" passes.
var checkCases = []struct {
	name, p, want string
	rules         Rules
}{
	{"root", "/", "", Rules{}},
	{"plain", "/api/v1/users/123", "", Rules{}},
	{"dots in names", "/static/app.min.js", "", Rules{}},
	{"dot file", "/.well-known/openid-configuration", "", Rules{}},
	{"dots and parameters in a name", "/a/v1.2;x=1/b", "", Rules{}},
	{"session id", "/shop/cart;jsessionid=ABC123", "", Rules{}},
	{"escaped space", "/files/my%20file.txt", "", Rules{}},
	{"escaped plus and colon", "/urn%3Aisbn%3A123/a+b", "", Rules{}},
	{"escaped dot in a name", "/files/report%2Epdf", "", Rules{}},
	{"unicode", "/caf%C3%A9/%E2%82%AC", "", Rules{}},
	{"double slash", "/a//b", "", Rules{}},
	{"trailing slash", "/a/b/", "", Rules{}},
	{"literal percent", "/discount/100%25", "", Rules{}},
	{"double-encoded letter", "/a%2541", "", Rules{}},
	{"double-encoded space", "/a%2520b", "", Rules{}},
	{"two dots in a name", "/a/..b/c..", "", Rules{}},
	{"asterisk", "*", "", Rules{}},
	{"empty", "", "", Rules{}},

	{"dot-dot", "/public/../admin/x", ReasonDotSegment, Rules{}},
	{"dot", "/public/./x", ReasonDotSegment, Rules{}},
	{"trailing dot-dot", "/public/x/..", ReasonDotSegment, Rules{}},
	{"three dots", "/public/.../admin", ReasonDotSegment, Rules{}},
	{"encoded dot-dot lower", "/public/%2e%2e/admin/x", ReasonEncodedDot, Rules{}},
	{"encoded dot-dot upper", "/public/%2E%2E/admin/x", ReasonEncodedDot, Rules{}},
	{"encoded dot-dot mixed", "/public/.%2E/admin/x", ReasonEncodedDot, Rules{}},
	{"encoded dot", "/public/%2e/x", ReasonEncodedDot, Rules{}},
	{"dot-dot and a space", "/public/..%20/admin/x", ReasonDotSegment, Rules{}},
	{"dot-dot params", "/public/..;/admin/x", ReasonDotParams, Rules{}},
	{"dot-dot params value", "/public/..;jsessionid=1/admin/x", ReasonDotParams, Rules{}},
	{"dot params", "/public/.;/x", ReasonDotParams, Rules{}},
	{"encoded dot-dot params", "/public/%2e%2e;/admin/x", ReasonDotParams, Rules{}},
	{"parameters alone", "/;/admin/x", ReasonEmptyParams, Rules{}},
	{"parameters alone with a value", "/;x=1/admin/x", ReasonEmptyParams, Rules{}},
	{"root session id", "/;jsessionid=ABC", ReasonEmptyParams, Rules{}},
	{"encoded parameters alone", "/%3Bx/admin/x", ReasonEmptyParams, Rules{}},
	{"dot-dot encoded semicolon", "/public/..%3b/admin/x", ReasonDotParams, Rules{}},
	{"dot-dot encoded semicolon upper", "/public/..%3B/admin/x", ReasonDotParams, Rules{}},
	{"backslash", "/public/..\\admin/x", ReasonBackslash, Rules{}},
	{"encoded backslash", "/public/..%5cadmin/x", ReasonBackslash, Rules{}},
	{"encoded backslash upper", "/public/..%5Cadmin/x", ReasonBackslash, Rules{}},
	{"encoded backslash in a name", "/a%5Cb", ReasonBackslash, Rules{}},
	{"encoded slash", "/public/..%2fadmin/x", ReasonEncodedSlash, Rules{}},
	{"encoded slash upper", "/public/..%2Fadmin/x", ReasonEncodedSlash, Rules{}},
	{"encoded slash in a name", "/projects/group%2Fproject", ReasonEncodedSlash, Rules{}},
	{"double-encoded dot-dot", "/public/%252e%252e/admin/x", ReasonDoubleEncoding, Rules{}},
	{"double-encoded dot-dot upper", "/public/%252E%252E/admin/x", ReasonDoubleEncoding, Rules{}},
	{"double-encoded half", "/public/.%252e/admin/x", ReasonDoubleEncoding, Rules{}},
	{"triple-encoded dot-dot", "/public/%25252e%25252e/admin/x", ReasonDoubleEncoding, Rules{}},
	{"double-encoded slash", "/public/..%252fadmin/x", ReasonDoubleEncoding, Rules{}},
	{"double-encoded backslash", "/public/..%255cadmin/x", ReasonDoubleEncoding, Rules{}},
	{"double-encoded NUL", "/public/..%2500/admin/x", ReasonDoubleEncoding, Rules{}},
	{"double-encoded overlong", "/public/%25c0%25ae%25c0%25ae/admin/x", ReasonDoubleEncoding, Rules{}},
	{"double-encoded semicolon", "/public/..%253b/admin/x", ReasonDoubleEncoding, Rules{}},
	{"fifth level", "/a%252525252541", ReasonDoubleEncoding, Rules{}},
	{"NUL", "/public/..%00/admin/x", ReasonControl, Rules{}},
	{"NUL in a name", "/admin.php%00.png", ReasonControl, Rules{}},
	{"line feed", "/public/x%0a", ReasonControl, Rules{}},
	{"CR LF", "/public/x%0d%0aSet-Cookie:a", ReasonControl, Rules{}},
	{"tab", "/public/..%09/admin", ReasonControl, Rules{}},
	{"DEL", "/public/x%7f", ReasonControl, Rules{}},
	{"raw control", "/public/x\x01", ReasonControl, Rules{}},
	{"overlong dot", "/public/%c0%ae%c0%ae/admin/x", ReasonUTF8, Rules{}},
	{"overlong dot upper", "/public/%C0%AE%C0%AE/admin/x", ReasonUTF8, Rules{}},
	{"overlong slash", "/public/..%c0%afadmin/x", ReasonUTF8, Rules{}},
	{"overlong backslash", "/public/..%c1%9cadmin/x", ReasonUTF8, Rules{}},
	{"three-byte overlong dot", "/public/%e0%80%ae%e0%80%ae/admin/x", ReasonUTF8, Rules{}},
	{"invalid byte", "/public/%ff", ReasonUTF8, Rules{}},
	{"surrogate", "/public/%ed%a0%80", ReasonUTF8, Rules{}},
	{"full-width dots", "/public/%ef%bc%8e%ef%bc%8e/admin/x", ReasonUnicode, Rules{}},
	{"full-width slash", "/public/..%ef%bc%8fadmin/x", ReasonUnicode, Rules{}},
	{"full-width backslash", "/public/..%EF%BC%BCadmin/x", ReasonUnicode, Rules{}},
	{"one dot leaders with params", "/public/%e2%80%a4%e2%80%a4;x/admin", ReasonUnicode, Rules{}},
	{"invalid escape", "/a%zz", ReasonEscape, Rules{}},
	{"cut escape", "/a%2", ReasonEscape, Rules{}},

	{"kept slash", "/projects/group%2Fproject/issues", "", Rules{KeepEncodedSlash: true}},
	{"kept slash lower", "/projects/group%2fsub%2fproject", "", Rules{KeepEncodedSlash: true}},
	{"kept slash before dot-dot", "/public/..%2Fadmin/x", ReasonEncodedSlash, Rules{KeepEncodedSlash: true}},
	{"kept slash after dot-dot", "/public/x%2F..%2F..%2Fadmin", ReasonEncodedSlash, Rules{KeepEncodedSlash: true}},
	{"kept slash leading", "/api/%2Fetc", ReasonEncodedSlash, Rules{KeepEncodedSlash: true}},
	{"kept slash doubled", "/api/a%2F%2Fb", ReasonEncodedSlash, Rules{KeepEncodedSlash: true}},
	{"kept slash double-encoded", "/api/a%252Fb", ReasonDoubleEncoding, Rules{KeepEncodedSlash: true}},
	{"kept slash and a double-encoded letter", "/api/a%2Fb%2541", "", Rules{KeepEncodedSlash: true}},
	{"kept slash, double-encoded dot-dot part", "/api/a%2F%252e%252e", ReasonDoubleEncoding, Rules{KeepEncodedSlash: true}},
	{"kept slash, still a backslash", "/api/a%2Fb%5C", ReasonBackslash, Rules{KeepEncodedSlash: true}},

	{"params refused", "/admin;x/secret", ReasonParams, Rules{RejectParams: true}},
	{"encoded params refused", "/admin%3Bx/secret", ReasonParams, Rules{RejectParams: true}},
	{"params allowed by default", "/admin;x/secret", "", Rules{}},
}

// TestCheck: what reject mode answers for each class of target.
func TestCheck(t *testing.T) {
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rules.Check(tc.p); got != tc.want {
				t.Fatalf("Check(%q) = %q, want %q", tc.p, got, tc.want)
			}
			// what Go's URL parsing makes of it, through Forwarded
			u, err := url.ParseRequestURI(tc.p)
			if err != nil || tc.p == "" || tc.p == "*" {
				return
			}
			if got := tc.rules.CheckURL(u.RawPath, u.Path); (got == "") != (tc.want == "") {
				t.Fatalf("through url.ParseRequestURI (Path %q, RawPath %q): %q, want %q", u.Path, u.RawPath, got, tc.want)
			}
		})
	}
}

// TestNormalize: what normalize mode forwards, or refuses.
func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name, p, want, reason string
		rules                 Rules
	}{
		{"normal", "/api/v1/users", "/api/v1/users", "", Rules{}},
		{"dot-dot", "/public/../admin/x", "/admin/x", "", Rules{}},
		{"dot", "/public/./x", "/public/x", "", Rules{}},
		{"above the root", "/../../x", "/x", "", Rules{}},
		{"trailing dot-dot", "/a/b/..", "/a/", "", Rules{}},
		{"trailing dot", "/a/b/.", "/a/b/", "", Rules{}},
		{"encoded dot-dot", "/public/%2e%2E/admin/x", "/admin/x", "", Rules{}},
		{"merged slashes", "//a///b//", "/a/b/", "", Rules{}},
		{"merged before resolved", "/a//..", "/", "", Rules{}},
		{"unreserved decoded", "/%7Euser/%41%2D%5f", "/~user/A-_", "", Rules{}},
		{"reserved kept", "/a%20b/c%3Ad/e%2Cf", "/a%20b/c%3Ad/e%2Cf", "", Rules{}},
		{"reserved kept beside a dot segment", "/x/../a%20b%3A", "/a%20b%3A", "", Rules{}},
		{"kept slash", "/p/group%2Fproject", "/p/group%2Fproject", "", Rules{KeepEncodedSlash: true}},
		{"kept slash, merged slashes", "/p//group%2Fproject", "/p/group%2Fproject", "", Rules{KeepEncodedSlash: true}},
		{"kept slash beside a dot segment", "/p/group%2Fproject/../x", "", ReasonEncodedSlash, Rules{KeepEncodedSlash: true}},
		{"dot-dot params", "/public/..;/admin/x", "", ReasonDotParams, Rules{}},
		{"backslash", "/public/..%5Cadmin", "", ReasonBackslash, Rules{}},
		{"double encoding", "/public/%252e%252e/admin", "", ReasonDoubleEncoding, Rules{}},
		{"NUL", "/public/..%00/admin", "", ReasonControl, Rules{}},
		{"three dots", "/public/.../admin", "", ReasonDotSegment, Rules{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := tc.rules.Normalize(tc.p)
			if got != tc.want || reason != tc.reason {
				t.Fatalf("Normalize(%q) = %q, %q; want %q, %q", tc.p, got, reason, tc.want, tc.reason)
			}
			if reason == "" {
				if again, r2 := tc.rules.Normalize(got); again != got || r2 != "" {
					t.Fatalf("not idempotent: Normalize(%q) = %q, %q", got, again, r2)
				}
				if r := tc.rules.Check(got); r != "" {
					t.Fatalf("the normalized %q is refused by Check: %s", got, r)
				}
			}
		})
	}
}

// TestForwarded: Forwarded chooses the path url.URL.EscapedPath sends.
func TestForwarded(t *testing.T) {
	for _, target := range []string{
		"/a/b", "/a%20b", "/a%2Fb", "/a%2e%2e/b", "/a%41", "/caf%C3%A9", "/a\\b", "/a{b}%2Fc",
		"/a!b", "/a%21b", "/é", "/a%25", "/x;y=1/z", "/a%3Ab",
	} {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			t.Fatalf("%q: %v", target, err)
		}
		p, decoded := Forwarded(u.RawPath, u.Path)
		want := u.EscapedPath()
		if decoded {
			// the upstream receives Path with the default escaping
			if got := (&url.URL{Path: p}).EscapedPath(); got != want {
				t.Errorf("%q: Forwarded gives the decoded %q, which escapes to %q; EscapedPath is %q", target, p, got, want)
			}
		} else if p != want {
			t.Errorf("%q: Forwarded = %q, EscapedPath = %q", target, p, want)
		}
	}
}

// The views of a path that the services behind a gateway take. Each
// returns the path it would serve, dot segments resolved; they are the
// oracle of the end-to-end and fuzz tests, written from the backends'
// documented behaviour and independent of pathguard.go.

// decodeOnce percent-decodes s leniently (a bad escape stays).
func decodeOnce(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]) {
			b.WriteByte(unhexByte(s[i+1])<<4 | unhexByte(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhexByte(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// resolveSegments resolves "." and ".." over "/"-separated segments, as
// every backend here does once it has its segments (a stack; nothing
// above the root), and merges slashes.
func resolveSegments(p string) string {
	var stack []string
	for _, s := range strings.Split(p, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		default:
			stack = append(stack, s)
		}
	}
	return "/" + strings.Join(stack, "/")
}

// backendViews are what the kinds of services behind a gateway make of
// the request path p they receive (escaped, as on the wire).
var backendViews = []struct {
	name string
	view func(p string) string
}{
	// decodes once, then resolves (most frameworks, nginx, Go)
	{"decoding", func(p string) string { return resolveSegments(decodeOnce(p)) }},
	// a servlet container (Tomcat, Jetty, Spring): drops ";..." from
	// each segment of the raw path, then decodes, then resolves
	{"servlet", func(p string) string {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if j := strings.IndexByte(s, ';'); j >= 0 {
				segs[i] = s[:j]
			}
		}
		return resolveSegments(decodeOnce(strings.Join(segs, "/")))
	}},
	// IIS and Windows: "\" is "/", and a name of dots and spaces is
	// trimmed of its trailing ones ("..." and ".. " are "..")
	{"iis", func(p string) string {
		d := strings.ReplaceAll(decodeOnce(p), "\\", "/")
		segs := strings.Split(d, "/")
		for i, s := range segs {
			if t := strings.Trim(s, ". "); t == "" && strings.Contains(s, "..") {
				segs[i] = ".."
			}
		}
		return resolveSegments(strings.Join(segs, "/"))
	}},
	// an application that decodes twice
	{"double-decoding", func(p string) string {
		return resolveSegments(strings.ReplaceAll(decodeOnce(decodeOnce(p)), "\\", "/"))
	}},
	// a backend in C that stops at NUL
	{"nul-truncating", func(p string) string {
		d := decodeOnce(p)
		if i := strings.IndexByte(d, 0); i >= 0 {
			d = d[:i]
		}
		return resolveSegments(d)
	}},
	// a backend that drops control bytes (a NUL-stripping string
	// routine, WHATWG URL parsing's removal of tabs and newlines applied
	// after decoding)
	{"control-stripping", func(p string) string {
		d := []byte(decodeOnce(p))
		n := 0
		for _, c := range d {
			if c >= 0x20 && c != 0x7f {
				d[n] = c
				n++
			}
		}
		return resolveSegments(string(d[:n]))
	}},
	// Unicode NFKC or a Windows best-fit code page folding look-alikes,
	// and an old decoder that reads overlong UTF-8
	{"folding", func(p string) string {
		d := decodeOnce(p)
		d = strings.NewReplacer("\xc0\xae", ".", "\xe0\x80\xae", ".", "\xc0\xaf", "/", "\xc1\x9c", "\\",
			"．", ".", "﹒", ".", "․", ".", "／", "/", "∕", "/", "⁄", "/", "＼", "\\", "﹨", "\\").Replace(d)
		return resolveSegments(strings.ReplaceAll(d, "\\", "/"))
	}},
}

// matcherView is what Caddy's path matchers compare with a pattern:
// the decoded path, lowercased, cleaned with slashes merged (and a
// trailing slash kept), as caddyhttp.MatchPath does.
func matcherView(decodedPath string) string {
	p := strings.ToLower(decodedPath)
	c := path.Clean(p)
	if c != "/" && strings.HasSuffix(p, "/") {
		c += "/"
	}
	return c
}

// FuzzRules: for any request target Go's server accepts, neither mode
// panics; every backend view reads a path that reject mode passes with
// the segments the matchers saw (sameSegments); normalize's output passes
// reject mode, is its own normalization, and decodes to what the matchers
// saw.
func FuzzRules(f *testing.F) {
	for _, tc := range checkCases {
		f.Add(tc.p, tc.rules.KeepEncodedSlash, tc.rules.RejectParams)
	}
	f.Add("/a/b/../c/./d//e", false, false)
	f.Add("/%2e%2e/%2E/a", false, false)
	f.Add("/p/group%2Fproject/../x", true, false)
	f.Fuzz(func(t *testing.T, target string, keep, params bool) {
		ru := Rules{KeepEncodedSlash: keep, RejectParams: params}
		u, err := url.ParseRequestURI(target)
		if err != nil || !strings.HasPrefix(target, "/") || strings.ContainsAny(target, "?#") {
			// raw targets as such (Go's server refuses what does not parse)
			_ = ru.Check(target)
			_, _ = ru.Normalize(target)
			return
		}
		p, decoded := Forwarded(u.RawPath, u.Path)
		check, normalize := ru.Check, ru.Normalize
		if decoded {
			check, normalize = ru.CheckDecoded, ru.NormalizeDecoded
		}
		wire := u.EscapedPath()

		if reason := check(p); reason == "" {
			if why := sameSegments(wire); why != "" {
				t.Fatalf("reject mode passed %q (on the wire %q): %s", target, wire, why)
			}
		}

		out, reason := normalize(p)
		if reason != "" {
			return
		}
		if r := check(out); r != "" {
			t.Fatalf("normalize made %q of %q, which reject mode refuses: %s", out, p, r)
		}
		if again, _ := normalize(out); again != out {
			t.Fatalf("normalize is not idempotent: %q -> %q -> %q", p, out, again)
		}
		dec := out
		if !decoded {
			if dec, err = url.PathUnescape(out); err != nil {
				t.Fatalf("normalize made %q of %q, which does not decode: %v", out, p, err)
			}
		}
		if m := matcherView(u.Path); strings.TrimSuffix(strings.ToLower(dec), "/") != strings.TrimSuffix(m, "/") &&
			!(m == "/" && dec == "/") {
			t.Fatalf("normalize forwards %q (decoded %q) for %q; the matchers saw %q", out, dec, target, m)
		}
	})
}

// sameSegments says how a backend view reads the path p (as on the wire)
// with other segments than the gateway's matchers, or "": for each
// segment, the view of that segment alone must have as many segments as
// the matchers' (decoded once, so a kept %2F makes two for both), and the
// view of the whole path must be those views end to end (nothing reaches
// over a segment: no "..", no NUL cutting the rest off). A view may read
// a segment's own bytes differently (a servlet container drops
// ";jsessionid=1", a double-decoding application reads %2541 as "A");
// that moves no route boundary.
func sameSegments(p string) string {
	count := func(s string) int {
		n := 0
		for _, part := range strings.Split(s, "/") {
			if part != "" {
				n++
			}
		}
		return n
	}
	for _, b := range backendViews {
		joined := ""
		for _, seg := range strings.Split(p, "/") {
			if seg == "" {
				continue
			}
			v := b.view("/" + seg)
			if got, want := count(v), count(decodeOnce(seg)); got != want {
				return fmt.Sprintf("a %s backend reads segment %q as %q (%d segments), the matchers as %q (%d)",
					b.name, seg, v, got, decodeOnce(seg), want)
			}
			joined += v
		}
		if whole := b.view(p); whole != joined && !(whole == "/" && joined == "") {
			return fmt.Sprintf("a %s backend reads the path as %q, its segments one by one as %q", b.name, whole, joined)
		}
	}
	return ""
}

// The benchmarks: the check's cost on paths that are already normal
// (0 allocations is the target), and on one that is not.
var benchPaths = []struct{ name, raw, path string }{
	{"plain", "", "/api/v1/orders/12345/items"},
	{"dots in names", "", "/static/js/app.3f2a1b.min.js"},
	{"escaped space (decoded)", "", "/files/my file.txt"},
	{"unicode (decoded)", "", "/café/€/x"},
	{"escaped colon", "/urn%3Aisbn%3A0451450523/reviews", "/urn:isbn:0451450523/reviews"},
	{"kept slash", "/projects/group%2Fproject/issues", "/projects/group/project/issues"},
}

func BenchmarkCheck(b *testing.B) {
	ru := Rules{KeepEncodedSlash: true}
	for _, bp := range benchPaths {
		b.Run(bp.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if reason := ru.CheckURL(bp.raw, bp.path); reason != "" {
					b.Fatal(reason)
				}
			}
		})
	}
	b.Run("traversal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ru.Check("/public/%2e%2e/admin/x") == "" {
				b.Fatal("passed")
			}
		}
	})
}

func BenchmarkNormalize(b *testing.B) {
	ru := Rules{KeepEncodedSlash: true}
	for _, bp := range benchPaths {
		b.Run(bp.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, changed, reason := ru.NormalizeURL(bp.raw, bp.path); changed || reason != "" {
					b.Fatal(changed, reason)
				}
			}
		})
	}
}
