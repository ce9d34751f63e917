package caddyopenapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzRequest sends what a client controls (the path, the query, a
// header, a cookie and a body with its content type) through the checks
// of the parameter-style document of TestRequests: whatever comes, the
// checks answer with a verdict, never a panic, and a refusal names at
// least one violation.
func FuzzRequest(f *testing.F) {
	s, err := Load(writeDoc(f, "api.yaml", map[string]string{"api.yaml": stylesDoc}), "", "")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("/simple/5/1,2,3/a,1,b,x/a=7", "", "", "", "", "")
	f.Add("/matrix/;id=5/;ids=1,2/;idsx=3;idsx=4/;a=1", "", "", "", "", "")
	f.Add("/label/.5/.1,2/.3.4", "", "", "", "", "")
	f.Add("/query", "n=3&tags=a&csv=1,2&sp=1%202&pipe=1|2&filter[min]=1&x=1&flag=true&json=%7B%22k%22%3A1%7D", "1,2", "", "", "")
	f.Add("/cookie", "", "", "session=0123abcd; ids=1,2", "", "")
	f.Add("/pets", "", "", "", "application/json", `{"kind":"cat","lives":9}`)
	f.Add("/pets", "", "", "", "application/x-www-form-urlencoded", "name=rex&age=3")
	f.Add("/files/a.json", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, path, query, list, cookie, ctype, body string) {
		u := &url.URL{Path: path, RawQuery: query}
		if !strings.HasPrefix(path, "/") {
			return
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.URL = u
		if body != "" {
			r.Method = http.MethodPost
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		}
		r.Header.Set("X-List", list)
		r.Header.Set("X-Rate", list)
		r.Header.Set("Cookie", cookie)
		r.Header.Set("Content-Type", ctype)
		var pv pathValues
		_, op := s.match(r.Method, r.URL.Path, &pv)
		if op == nil {
			return
		}
		h := &OpenAPI{MaxRequestBody: 1 << 20}
		v, vs, err := h.checkRequest(r, op, &pv)
		if err != nil {
			return // a body that could not be read
		}
		if v != verdictPass && len(vs) == 0 {
			t.Fatalf("verdict %d without a violation", v)
		}
	})
}
