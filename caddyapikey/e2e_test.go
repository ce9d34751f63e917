package caddyapikey_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	_ "github.com/mholt/caddy-ratelimit"

	"github.com/apigate/gateway/caddyapikey/apikeys"
	_ "github.com/apigate/gateway/caddyaudit"
	_ "github.com/apigate/gateway/caddyjwt"
	_ "github.com/apigate/gateway/caddypermcache"
	_ "github.com/apigate/gateway/caddyrbac"
	"github.com/apigate/gateway/internal/testkit/pathtest"
	"github.com/apigate/gateway/internal/testkit/problemtest"
)

// Ports of this package: admin 2950, listeners 20300-20349 (caddyclientcert
// has admin 2951 and 20350-20399).
const (
	adminPort = 2950
	gwPort    = 20301
)

const jwtSecret = "caddyapikey-e2e-secret-0123456789abcdef0123456789"

type key struct{ key, hash string }

func newKey(t *testing.T, id string) key {
	t.Helper()
	k, h, err := apikeys.New(id)
	if err != nil {
		t.Fatal(err)
	}
	return key{k, h}
}

// writeKeys replaces the keys file atomically, as an operator's tooling would.
func writeKeys(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func entry(id, hash, sub, roles, extra string) string {
	return fmt.Sprintf(`{"id":%q,"hash":%q,"sub":%q,"roles":[%s]%s}`, id, hash, sub, roles, extra)
}

type result struct {
	status int
	body   string
	header http.Header
}

func do(t *testing.T, method, url string, header map[string]string) result {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header}
}

func runID(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestAPIKey runs api_key in the real Caddy: the 401s, from_query, combined
// use with jwt_auth, the whole duty chain with a real permission service,
// upstream and audit file sink, and the keys file's reloads.
//
// It runs on both request paths (Caddy's and the fast path) and compares
// every response (status, header fields, body), what the upstream and the
// permission service received, and the audit events between them.
func TestAPIKey(t *testing.T) {
	pathtest.Run(t, testAPIKey)
}

func testAPIKey(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
	http.DefaultClient.CloseIdleConnections() // the other path's connections
	dir := t.TempDir()
	run := runID(t)
	// record records a response under key, as the paths must agree on it
	record := func(key string, r result) {
		rec.Add(p, key, pathtest.Resp(r.status, r.header, r.body, run, "RUN", dir, "DIR"))
	}
	keysPath := filepath.Join(dir, "keys.json")
	auditPath := filepath.Join(dir, "audit.jsonl")
	logPath := filepath.Join(dir, "caddy.log") // the test reads what the module logged

	reader := newKey(t, "reader-"+run)
	noRole := newKey(t, "norole-"+run)
	expired := newKey(t, "old-"+run)
	alice, bob := "alice-"+run, "bob-"+run
	good := "[" + strings.Join([]string{
		entry(reader.key[3:3+len("reader-"+run)], reader.hash, alice, `"reader"`, `,"scope":"orders:read"`),
		entry("norole-"+run, noRole.hash, bob, ``, ``),
		entry("old-"+run, expired.hash, "old", `"reader"`, `,"expires":"2020-01-01T00:00:00Z"`),
	}, ",") + "]"
	writeKeys(t, keysPath, good)

	var mu sync.Mutex
	var upstreamSaw []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		upstreamSaw = append(upstreamSaw, r.URL.RequestURI()+" "+fmt.Sprint(r.Header))
		mu.Unlock()
		fmt.Fprintf(w, "upstream %s", r.URL.Path)
	}))
	t.Cleanup(upstream.Close)
	var permSubjects []string
	perm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Subject string   `json:"subject"`
			Roles   []string `json:"roles"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		permSubjects = append(permSubjects, body.Subject+"|"+strings.Join(body.Roles, ","))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(perm.Close)
	// echo answers with the headers forward_claim sets
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "id=%q roles=%q scope=%q", r.Header.Values("X-User-Id"), r.Header.Values("X-User-Roles"), r.Header.Values("X-Scope"))
	}))
	t.Cleanup(echo.Close)

	config := fmt.Sprintf(`{
	admin localhost:%[1]d
	http_port 20310
	https_port 20311
	grace_period 1s
	log {
		output file %[10]s
		format json
	}
	audit {
		sink file %[3]s {
			flush_interval 20ms
		}
	}
}

:%[2]d {
	route /k/* {
		api_key {
			keys_file %[4]s
			check_interval 20ms
		}
		respond "{http.auth.user.id} {http.auth.api_key.id}"
	}
	route /q/* {
		api_key {
			keys_file %[4]s
			from_query api_key
		}
		reverse_proxy %[5]s
	}
	route /either/* {
		api_key {
			keys_file %[4]s
			optional
		}
		jwt_auth {
			hmac_secret %[6]s
		}
		respond "{http.auth.user.id}"
	}
	route /fwd-jwt/* {
		api_key {
			keys_file %[4]s
			optional
		}
		jwt_auth {
			hmac_secret %[6]s
			forward_claim sub X-User-Id
			forward_claim roles X-User-Roles
		}
		reverse_proxy %[9]s
	}
	route /fwd-key/* {
		api_key {
			keys_file %[4]s
			optional
			forward_claim sub X-User-Id
			forward_claim scope X-Scope
		}
		reverse_proxy %[9]s
	}
	route /first/* {
		jwt_auth {
			hmac_secret %[6]s
			optional
		}
		api_key {
			keys_file %[4]s
		}
		respond "{http.auth.user.id}"
	}
	route /chain/* {
		audit
		api_key {
			keys_file %[4]s
		}
		rbac {
			require any reader
			require_scope any orders:read
		}
		rate_limit {
			zone apikey_e2e_%[8]s {
				key {http.auth.user.id}
				events 3
				window 1m
			}
		}
		permission {
			url %[7]s/check
			cache_ttl 0 # no caching: each request asks (1ms made hit or miss a race)
		}
		reverse_proxy %[5]s
	}
}
`, adminPort, gwPort, auditPath, keysPath, upstream.URL, jwtSecret, perm.URL, run, echo.URL, logPath)
	p.Load(t, adminPort, config, "srv0")
	base := fmt.Sprintf("http://127.0.0.1:%d", gwPort)

	t.Run("valid key sets the identity and placeholders", func(t *testing.T) {
		r := do(t, "GET", base+"/k/x", map[string]string{"X-API-Key": reader.key})
		record(p.Key(t), r)
		if r.status != 200 || r.body != alice+" reader-"+run {
			t.Fatalf("%d %q", r.status, r.body)
		}
	})

	rejected := []struct {
		name, key, reason string
	}{
		{"unknown", newKey(t, "nobody").key, "unknown key"},
		{"wrong secret", reader.key[:len(reader.key)-8] + "00000000", "unknown key"},
		{"expired", expired.key, "key expired"},
		{"malformed", "not-a-key", "malformed key: does not start with gk_ (a key is gk_<id>_<secret>)"},
		{"too long to read", reader.key + strings.Repeat("0", 600), "malformed key: longer than 512 characters (a key is gk_<id>_<secret>)"},
	}
	for _, tc := range rejected {
		t.Run(tc.name+" is 401 invalid_token", func(t *testing.T) {
			r := do(t, "GET", base+"/k/x", map[string]string{"X-API-Key": tc.key})
			record(p.Key(t), r)
			want, _ := json.Marshal(map[string]string{"error": "invalid_token", "reason": tc.reason})
			if err := problemtest.Extends(r.body, 401, string(want), "/k/x"); r.status != 401 || err != nil {
				t.Fatalf("%d, want 401: %v", r.status, err)
			}
			if ch := r.header.Get("WWW-Authenticate"); ch != `Bearer error="invalid_token", error_description="`+tc.reason+`"` {
				t.Fatalf("WWW-Authenticate %q", ch)
			}
		})
	}
	t.Run("missing key is 401 with a realm challenge", func(t *testing.T) {
		r := do(t, "GET", base+"/k/x", nil)
		record(p.Key(t), r)
		if r.status != 401 || problemtest.Extends(r.body, 401, `{"error":"unauthorized","reason":"missing api key"}`, "/k/x") != nil || r.header.Get("WWW-Authenticate") != `Bearer realm="gateway"` {
			t.Fatalf("%d %q %q", r.status, r.body, r.header.Get("WWW-Authenticate"))
		}
	})

	t.Run("from_query, removed before the upstream", func(t *testing.T) {
		r := do(t, "GET", base+"/q/x?a=1&api_key="+reader.key, nil)
		record(p.Key(t)+"/query", r)
		if r.status != 200 {
			t.Fatalf("%d %q", r.status, r.body)
		}
		r = do(t, "GET", base+"/q/x", map[string]string{"X-API-Key": reader.key})
		record(p.Key(t)+"/header", r)
		if r.status != 401 {
			t.Fatalf("a header when only from_query is configured: %d", r.status)
		}
		r = do(t, "GET", base+"/q/x?api_key=gk_x", nil)
		record(p.Key(t)+"/malformed", r)
		if r.status != 401 {
			t.Fatalf("malformed query key: %d", r.status)
		}
	})

	t.Run("optional api_key, then jwt_auth", func(t *testing.T) {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "jwt-user", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(jwtSecret))
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name   string
			header map[string]string
			status int
			body   string
		}{
			{"api key", map[string]string{"X-API-Key": reader.key}, 200, alice},
			{"token", map[string]string{"Authorization": "Bearer " + tok}, 200, "jwt-user"},
			// the first identity stands: jwt_auth does not look at the token
			{"both", map[string]string{"X-API-Key": reader.key, "Authorization": "Bearer " + tok}, 200, alice},
			{"api key and a bad token", map[string]string{"X-API-Key": reader.key, "Authorization": "Bearer x.y.z"}, 200, alice},
			{"neither: jwt_auth asks for a token", nil, 401, `{"error":"unauthorized","reason":"missing token"}`},
			{"bad key: api_key refuses it", map[string]string{"X-API-Key": expired.key, "Authorization": "Bearer " + tok}, 401, `{"error":"invalid_token","reason":"key expired"}`},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := do(t, "GET", base+"/either/x", tc.header)
				record(p.Key(t), r)
				if tc.status == 401 {
					if err := problemtest.Extends(r.body, 401, tc.body, "/either/x"); r.status != 401 || err != nil {
						t.Fatalf("%d, want 401: %v", r.status, err)
					}
				} else if r.status != tc.status || r.body != tc.body {
					t.Fatalf("%d %q, want %d %q", r.status, r.body, tc.status, tc.body)
				}
			})
		}
	})

	t.Run("forward_claim applies to the api_key identity", func(t *testing.T) {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "jwt-user", "roles": []string{"a", "b"}, "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(jwtSecret))
		if err != nil {
			t.Fatal(err)
		}
		spoof := map[string]string{"X-User-Id": "admin", "X-User-Roles": "admin", "X-Scope": "all"}
		with := func(h map[string]string) map[string]string {
			out := map[string]string{}
			for k, v := range spoof {
				out[k] = v
			}
			for k, v := range h {
				out[k] = v
			}
			return out
		}
		cases := []struct {
			name, path string
			header     map[string]string
			body       string
		}{
			// jwt_auth's forward_claim, for a request api_key identified
			{"jwt_auth's rules, api key", "/fwd-jwt/x", with(map[string]string{"X-API-Key": reader.key}), fmt.Sprintf(`id=["%s"] roles=["reader"] scope=["all"]`, alice)},
			{"jwt_auth's rules, token", "/fwd-jwt/x", with(map[string]string{"Authorization": "Bearer " + tok}), `id=["jwt-user"] roles=["a,b"] scope=["all"]`},
			// api_key's own forward_claim
			{"api_key's rules, api key", "/fwd-key/x", with(map[string]string{"X-API-Key": reader.key}), fmt.Sprintf(`id=["%s"] roles=["admin"] scope=["orders:read"]`, alice)},
			{"api_key's rules, anonymous: the client's headers are removed", "/fwd-key/x", spoof, `id=[] roles=["admin"] scope=[]`},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				r := do(t, "GET", base+tc.path, tc.header)
				record(p.Key(t), r)
				if r.status != 200 || r.body != tc.body {
					t.Fatalf("%d %s, want 200 %s", r.status, r.body, tc.body)
				}
			})
		}
	})

	t.Run("an identity from an earlier source stands", func(t *testing.T) {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "jwt-first", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(jwtSecret))
		if err != nil {
			t.Fatal(err)
		}
		// jwt_auth runs first here: api_key passes the request on without
		// looking at the (malformed) key it also carries
		r := do(t, "GET", base+"/first/x", map[string]string{"Authorization": "Bearer " + tok, "X-API-Key": "not-a-key"})
		record(p.Key(t)+"/token", r)
		if r.status != 200 || r.body != "jwt-first" {
			t.Fatalf("%d %q, want 200 jwt-first", r.status, r.body)
		}
		r = do(t, "GET", base+"/first/x", map[string]string{"X-API-Key": reader.key})
		record(p.Key(t)+"/key", r)
		if r.status != 200 || r.body != alice {
			t.Fatalf("key alone: %d %q, want 200 %s", r.status, r.body, alice)
		}
	})

	t.Run("the whole duty chain", func(t *testing.T) {
		r := do(t, "GET", base+"/chain/x", map[string]string{"X-API-Key": noRole.key})
		record(p.Key(t)+"/no role", r)
		if r.status != 403 {
			t.Fatalf("key without the role: %d %q", r.status, r.body)
		}
		for i := 0; i < 3; i++ {
			r := do(t, "GET", base+"/chain/x", map[string]string{"X-API-Key": reader.key})
			record(fmt.Sprintf("%s/request %d", p.Key(t), i), r)
			if r.status != 200 || r.body != "upstream /chain/x" {
				t.Fatalf("request %d: %d %q", i, r.status, r.body)
			}
		}
		r = do(t, "GET", base+"/chain/x", map[string]string{"X-API-Key": reader.key})
		record(p.Key(t)+"/over the limit", r)
		if r.status != 429 {
			t.Fatalf("4th request of %s: %d, want 429 (rate_limit keyed on the subject)", alice, r.status)
		}
		mu.Lock()
		perms := strings.Join(permSubjects, " ")
		saw := strings.Join(upstreamSaw, "\n")
		mu.Unlock()
		rec.Add(p, p.Key(t)+"/permission service saw", strings.ReplaceAll(perms, run, "RUN"))
		rec.Add(p, p.Key(t)+"/upstream saw", strings.ReplaceAll(saw, run, "RUN"))
		if !strings.Contains(perms, alice+"|reader") {
			t.Fatalf("permission service saw %q, want %s with role reader", perms, alice)
		}
		secret := reader.key[strings.LastIndexByte(reader.key, '_')+1:]
		if strings.Contains(saw, secret) {
			t.Fatalf("the upstream received the key: %s", saw)
		}
		// audit: events for the chain's requests carry the subject, never the key
		var data []byte
		deadline := time.Now().Add(10 * time.Second)
		for {
			data, _ = os.ReadFile(auditPath)
			if bytes.Count(data, []byte(`"subject":"`+alice+`"`)) >= 4 && bytes.Contains(data, []byte(`"subject":"`+bob+`"`)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("audit file after 10s:\n%s", data)
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, k := range []key{reader, noRole} {
			s := k.key[strings.LastIndexByte(k.key, '_')+1:]
			if bytes.Contains(data, []byte(s)) {
				t.Fatalf("the audit file holds key material:\n%s", data)
			}
		}
		// the events name the key by its id, and how the client proved it
		if want := `"auth":"api_key","bytes_out"`; !bytes.Contains(data, []byte(want)) {
			t.Fatalf("no event with %s:\n%s", want, data)
		}
		if want := `"credential_id":"reader-` + run + `"`; !bytes.Contains(data, []byte(want)) {
			t.Fatalf("no event with %s:\n%s", want, data)
		}
		for i, ev := range pathtest.ReadEvents(t, auditPath) {
			rec.Add(p, fmt.Sprintf("%s/event %d", p.Key(t), i), pathtest.Event(ev, run, "RUN"))
		}
	})

	t.Run("keys file rotation while running", func(t *testing.T) {
		rotated := newKey(t, "rot-"+run)
		writeKeys(t, keysPath, "["+entry("rot-"+run, rotated.hash, "carol", `"reader"`, ``)+"]")
		waitStatus(t, base+"/k/x", rotated.key, 200)
		waitStatus(t, base+"/k/x", reader.key, 401)

		// a broken file keeps the last good keys: requests (each may
		// check the file, 20ms after the last check) until the module
		// says it read the broken file, then one more
		writeKeys(t, keysPath, `[{"id":"x","hash":"nope","sub":"s"}]`)
		const notReloaded = `"msg":"keys file not reloaded; keeping the last good keys"`
		var r result
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			r = do(t, "GET", base+"/k/x", map[string]string{"X-API-Key": rotated.key})
			if r.status != 200 {
				t.Fatalf("after a broken file the last good key is refused: %d %q", r.status, r.body)
			}
			logged, _ := os.ReadFile(logPath)
			if bytes.Contains(logged, []byte(notReloaded)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s in the log after 10s:\n%s", notReloaded, logged)
			}
		}
		r = do(t, "GET", base+"/k/x", map[string]string{"X-API-Key": rotated.key})
		record(p.Key(t)+"/after a broken file", r)
		if r.status != 200 {
			t.Fatalf("after a broken file the last good key is refused: %d %q", r.status, r.body)
		}
		writeKeys(t, keysPath, good)
		waitStatus(t, base+"/k/x", reader.key, 200)
		waitStatus(t, base+"/k/x", rotated.key, 401)
	})

	t.Run("a broken keys file fails the config load", func(t *testing.T) {
		broken := filepath.Join(dir, "broken.json")
		writeKeys(t, broken, `[{"id":"a","hash":"sha256:00","sub":"s"}]`)
		cfg := p.JSON(t, strings.Replace(config, keysPath, broken, 1))
		resp, err := http.Post(fmt.Sprintf("http://localhost:%d/load", adminPort), "application/json", bytes.NewReader(cfg))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		rec.Add(p, p.Key(t)+"/load", pathtest.Resp(resp.StatusCode, nil, string(b), dir, "DIR"))
		if resp.StatusCode == 200 || !strings.Contains(string(b), "keys_file "+broken+": entry 1 (id \\\"a\\\"): invalid hash") {
			t.Fatalf("load: %d %s", resp.StatusCode, b)
		}
		// the running config is untouched
		r := do(t, "GET", base+"/k/x", map[string]string{"X-API-Key": reader.key})
		record(p.Key(t)+"/after", r)
		if r.status != 200 {
			t.Fatalf("after the failed load: %d", r.status)
		}
	})
}

func waitStatus(t *testing.T, url, k string, status int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := do(t, "GET", url, map[string]string{"X-API-Key": k})
		if r.status == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %d %q, want %d", r.status, r.body, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
