package caddyaudit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/caddyaudit/auditchain"
	"github.com/apigate/gateway/identity"
)

// newRequest builds a request as Caddy's server prepares it: a vars table,
// a replacer with the HTTP placeholders, and the client IP.
func newRequest(method, target string) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "192.0.2.7:5555"
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{
		caddyhttp.ClientIPVarKey: "192.0.2.7",
	})
	ctx = context.WithValue(ctx, caddyhttp.ExtraLogFieldsCtxKey, new(caddyhttp.ExtraLogFields))
	r = r.WithContext(ctx)
	repl := caddyhttp.NewTestReplacer(r)
	return r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
}

func TestHandlerEvents(t *testing.T) {
	id := &identity.Identity{Subject: "alice", Claims: map[string]any{"sub": "alice"}}
	jwtID := &identity.Identity{Subject: "carol", Method: identity.MethodJWT}
	keyID := &identity.Identity{Subject: "svc", Method: identity.MethodAPIKey, CredentialID: "k_42"}
	rbacAllow := identity.NewDecider("rbac", "require any admin,editor")
	rbacRole := identity.NewDecider("rbac", "require any admin")
	permService := identity.NewDecider("permission", "service")
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		header    string
		reqHeader string
		next      func(w http.ResponseWriter, r *http.Request) error
		wantErr   bool
		want      Event
	}{
		{
			name: "allowed",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.Set(r, id)
				identity.SetRoles(r, []string{"admin", "ops"})
				w.WriteHeader(201)
				_, err := io.WriteString(w, "hello")
				return err
			},
			want: Event{Status: 201, Subject: "alice", Roles: []string{"admin", "ops"}, Decision: "allow", BytesOut: 5},
		},
		{
			name: "denied by jwt_auth (written response)",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.SetDenial(r, "jwt_auth", "token expired")
				w.WriteHeader(401)
				_, err := io.WriteString(w, `{"error":"invalid_token"}`)
				return err
			},
			want: Event{Status: 401, Decision: "deny", Reason: "token expired", DecidedBy: "jwt_auth", BytesOut: 25},
		},
		{
			name: "denied by rbac (handler error)",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.Set(r, id)
				identity.SetDenial(r, "rbac", "missing role")
				return caddyhttp.Error(http.StatusForbidden, boom)
			},
			wantErr: true,
			want:    Event{Status: 403, Subject: "alice", Decision: "deny", Reason: "missing role", DecidedBy: "rbac"},
		},
		{
			name: "rate limited without reason",
			next: func(w http.ResponseWriter, r *http.Request) error {
				return caddyhttp.Error(http.StatusTooManyRequests, boom)
			},
			wantErr: true,
			want:    Event{Status: 429, Decision: "deny", Reason: "rate limited"},
		},
		{
			name: "permission service down",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.SetDenial(r, "permission", "permission service unavailable")
				w.WriteHeader(503)
				return nil
			},
			want: Event{Status: 503, Decision: "deny", Reason: "permission service unavailable", DecidedBy: "permission"},
		},
		{
			name: "denied by a named rule after an allow",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.Set(r, jwtID)
				identity.SetDecidedBy(r, rbacAllow)
				identity.SetPermissionCache(r, identity.PermissionCacheHit)
				identity.SetDenialBy(r, permService, "permission denied")
				w.WriteHeader(403)
				return nil
			},
			want: Event{Status: 403, Subject: "carol", Auth: "jwt", Decision: "deny", Reason: "permission denied",
				DecidedBy: "permission: service", PermissionCache: "hit"},
		},
		{
			name: "allowed: the identity source decided",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.Set(r, keyID)
				return nil
			},
			want: Event{Status: 200, Subject: "svc", Auth: "api_key", CredentialID: "k_42", Decision: "allow", DecidedBy: "api_key"},
		},
		{
			name: "allowed: the last duty that allowed decided",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.Set(r, jwtID)
				identity.SetDecidedBy(r, rbacAllow)
				identity.SetPermissionCache(r, identity.PermissionCacheMiss)
				identity.SetDecidedBy(r, permService)
				return nil
			},
			want: Event{Status: 200, Subject: "carol", Auth: "jwt", Decision: "allow", DecidedBy: "permission: service", PermissionCache: "miss"},
		},
		{
			name: "would deny: the first dry-run denial is kept",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.Set(r, jwtID)
				identity.SetWouldDeny(r, rbacRole, "missing role")
				identity.SetWouldDeny(r, permService, "permission denied")
				identity.SetDecidedBy(r, permService)
				return nil
			},
			want: Event{Status: 200, Subject: "carol", Auth: "jwt", Decision: "would_deny", Reason: "missing role", DecidedBy: "rbac: require any admin"},
		},
		{
			name: "a real denial wins over a would-be one",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.SetWouldDeny(r, rbacRole, "missing role")
				identity.SetDenialBy(r, permService, "permission denied")
				w.WriteHeader(403)
				return nil
			},
			want: Event{Status: 403, Decision: "deny", Reason: "permission denied", DecidedBy: "permission: service"},
		},
		{
			name: "refused by openapi: its first violation",
			next: func(w http.ResponseWriter, r *http.Request) error {
				identity.SetOpenAPIViolation(r, &identity.OpenAPIViolation{Location: "query.limit", Keyword: "maximum", Message: "must be <= 100"})
				identity.SetOpenAPIViolation(r, &identity.OpenAPIViolation{Location: "body", Keyword: "type", Message: "must be object"})
				identity.SetDenial(r, "openapi", "invalid request")
				w.WriteHeader(400)
				return nil
			},
			want: Event{Status: 400, Decision: "deny", Reason: "invalid request", DecidedBy: "openapi",
				OpenAPIViolation: &identity.OpenAPIViolation{Location: "query.limit", Keyword: "maximum", Message: "must be <= 100"}},
		},
		{
			name:    "plain error",
			next:    func(w http.ResponseWriter, r *http.Request) error { return boom },
			wantErr: true,
			want:    Event{Status: 500, Decision: "allow"},
		},
		{
			name: "nothing written",
			next: func(w http.ResponseWriter, r *http.Request) error { return nil },
			want: Event{Status: 200, Decision: "allow"},
		},
		{
			// strip_prefix, uri and rewrite change the request in place;
			// the event keeps what the client sent.
			name: "request rewritten further down",
			next: func(w http.ResponseWriter, r *http.Request) error {
				r.Method, r.Host, r.URL.Path = "GET", "upstream.internal", "/7"
				return nil
			},
			want: Event{Status: 200, Decision: "allow"},
		},
		{
			// The client's id is recorded beside the gateway's own, never
			// instead of it (JetStream de-duplicates on request_id).
			name: "request id header", header: "X-Request-Id", reqHeader: "req-42",
			next: func(w http.ResponseWriter, r *http.Request) error { return nil },
			want: Event{Status: 200, Decision: "allow", ClientRequestID: "req-42"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handler{Route: "orders", RequestIDHeader: tc.header, app: &App{}}
			r := newRequest("POST", "http://api.test/orders/7?x=1")
			if tc.reqHeader != "" {
				r.Header.Set(tc.header, tc.reqHeader)
			}
			rec := httptest.NewRecorder()
			var nextErr error
			err := h.ServeHTTP(rec, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				nextErr = tc.next(w, r)
				return nextErr
			}))
			if err != nextErr {
				t.Fatalf("error %v, want the next handler's %v unchanged", err, nextErr)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			got := Recent(1)[0]
			if got.RequestID == "" {
				t.Fatal("no request id")
			}
			if tc.want.RequestID == "" {
				repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
				uuid, _ := repl.GetString("http.request.uuid")
				if got.RequestID != uuid {
					t.Fatalf("request_id %q, want {http.request.uuid} %q", got.RequestID, uuid)
				}
				tc.want.RequestID = uuid
			}
			if got.Time.IsZero() || got.DurationMS < 0 {
				t.Fatalf("time %v duration %v", got.Time, got.DurationMS)
			}
			tc.want.Time, tc.want.DurationMS = got.Time, got.DurationMS
			tc.want.Route, tc.want.Method, tc.want.Host, tc.want.Path, tc.want.RemoteIP = "orders", "POST", "api.test", "/orders/7", "192.0.2.7"
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("event\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestEventJSON(t *testing.T) {
	ev := Event{Time: time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC), RequestID: "r\"1", Route: "o\\r",
		Method: "GET", Host: "h", Path: "/p\n\t\x01\u2028\xff", Status: 403, DurationMS: 1.5, RemoteIP: "::1",
		Subject: "s<>&", Roles: []string{"a", "b"}, Decision: "deny", Reason: "missing role", BytesOut: 9}
	chained := ev
	chained.Auth, chained.CredentialID, chained.DecidedBy, chained.PermissionCache = "api_key", "k\"1", "rbac: require any a,b", "hit"
	chained.ClientRequestID = "client \"id\""
	chained.AuthSource = "oidc_session"
	chained.Plan = "pro-\"1"
	chained.OpenAPIViolation = &identity.OpenAPIViolation{Location: "body/items/0/pr\"ice", Keyword: "minimum", Message: "must be >= 0"}
	chained.Extra = Fields{{"b", "2"}, {"a", "1\x00"}}
	chained.Chain, chained.Seq, chained.Hash = "0123456789abcdef", 7, strings.Repeat("ab", 32)
	checkpoint := Event{Time: ev.Time, Kind: auditchain.KindCheckpoint, Chain: "0123456789abcdef", Seq: 8,
		Hash: strings.Repeat("cd", 32), KeyID: "k", LastSeq: 7, LastHash: chained.Hash, Signature: "c2ln", Final: true,
		RequestID: "0123456789abcdef-8", Node: "n"}
	written := map[string]bool{}
	for name, e := range map[string]Event{"plain": ev, "chained": chained, "checkpoint": checkpoint} {
		b := e.AppendJSON(nil)
		var got Event
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: invalid JSON %s: %v", name, b, err)
		}
		want := e
		if want.Kind == "" {
			want.Path = "/p\n\t\x01\u2028\ufffd"
		}
		if want.Extra != nil {
			want.Extra = slices.Clone(want.Extra).sorted()
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", name, got, want)
		}
		// The bytes are canonical JSON: what a chain's hash covers.
		if c, err := auditchain.Canonical(b); err != nil || string(c) != string(b) {
			t.Errorf("%s: not canonical:\n got %s\nwant %s (%v)", name, b, c, err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		for k := range m {
			written[k] = true
		}
		if name == "plain" {
			for _, k := range []string{"time", "request_id", "route", "method", "host", "path", "status", "duration_ms",
				"remote_ip", "subject", "roles", "decision", "reason", "bytes_out"} {
				if _, ok := m[k]; !ok {
					t.Errorf("field %q missing", k)
				}
			}
			if len(m) != 14 {
				t.Errorf("a request event without chain or extra has %d fields, want the contract's 14: %s", len(m), b)
			}
			if extractRequestID(b) != "r\"1" {
				t.Fatal("extractRequestID")
			}
		}
	}
	// AppendJSON writes exactly the fields Event declares (a field added to
	// the struct but not to the writer, or the other way round, fails)
	declared := map[string]bool{}
	rt := reflect.TypeOf(Event{})
	for i := 0; i < rt.NumField(); i++ {
		if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			declared[name] = true
		}
	}
	for k := range written {
		if !declared[k] {
			t.Errorf("AppendJSON wrote %q, which Event does not declare", k)
		}
	}
	for k := range declared {
		if !written[k] {
			t.Errorf("Event declares %q, which AppendJSON did not write", k)
		}
	}
}

func FuzzEventJSON(f *testing.F) {
	f.Add("id", "/path", "sub", "role")
	f.Add("\x00\"\\", "\xff\xfe", "\u2029", "")
	f.Fuzz(func(t *testing.T, id, path, sub, role string) {
		ev := Event{RequestID: id, Path: path, Subject: sub, Roles: []string{role}}
		b := ev.AppendJSON(nil)
		var got Event
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("invalid JSON %q: %v", b, err)
		}
		// Same string as encoding/json would give.
		enc, _ := json.Marshal(ev.Path)
		var want string
		json.Unmarshal(enc, &want)
		if got.Path != want {
			t.Fatalf("path %q, want %q", got.Path, want)
		}
		// Canonical whatever the strings hold, so that a verifier that
		// decodes and re-encodes an event computes the same hash.
		ev.Extra, ev.Chain, ev.Hash = Fields{{"k", role}}, "c", "h"
		ev.Auth, ev.CredentialID, ev.DecidedBy, ev.PermissionCache, ev.Plan = role, id, sub, path, sub
		b = ev.AppendJSON(nil)
		if c, err := auditchain.Canonical(b); err != nil || string(c) != string(b) {
			t.Fatalf("not canonical:\n got %q\nwant %q (%v)", b, c, err)
		}
	})
}

func TestUnmarshalCaddyfileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, input, want string
	}{
		{"unknown option", "audit {\n bogus 1\n}", "unrecognized subdirective 'bogus'"},
		{"bad queue size", "audit {\n queue_size -3\n}", `invalid queue_size "-3"`},
		{"bad duration", "audit {\n block_timeout soon\n}", `invalid block_timeout "soon"`},
		{"sink without type", "audit {\n sink\n}", "sink needs a type"},
		{"unknown sink type", "audit {\n sink kafka x\n}", "unrecognized sink type 'kafka'"},
		{"sink without url", "audit {\n sink http\n}", "sink http needs a destination"},
		{"header on nats", "audit {\n sink nats nats://x {\n header A b\n }\n}", "only for http sinks"},
		{"subject on http", "audit {\n sink http http://x {\n subject a\n }\n}", "only for nats sinks"},
		{"header arity", "audit {\n sink http http://x {\n header A\n }\n}", "header needs a name and a value"},
		{"bad batch size", "audit {\n sink http http://x {\n batch_size many\n }\n}", `invalid batch_size "many"`},
		{"unknown sink option", "audit {\n sink file /x {\n rotate daily\n }\n}", "unrecognized subdirective 'rotate'"},
		{"bad durability", "audit {\n durability ram\n}", "invalid durability 'ram'"},
		{"bad on_full", "audit {\n sink file /x {\n on_full wait\n }\n}", "invalid on_full 'wait'"},
		{"bad spool size", "audit {\n spool_max_size lots\n}", "invalid spool_max_size 'lots'"},
		{"chain without key", "audit {\n chain\n}", "chain needs the Ed25519 private key file"},
		{"chain option", "audit {\n chain /k {\n every 1s\n }\n}", "unrecognized chain subdirective 'every'"},
		{"bad sync interval", "audit {\n sync_interval 0s\n}", `invalid sync_interval "0s"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a App
			err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	var h Handler
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("audit {\n nope\n}")); err == nil {
		t.Fatal("want error for unknown handler subdirective")
	}
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("audit a b")); err == nil {
		t.Fatal("want error for two route names")
	}
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("audit {\n include_header a b c\n}")); err == nil ||
		!strings.Contains(err.Error(), "include_header needs a name and an optional key") {
		t.Fatalf("include_header with three arguments: %v", err)
	}
}

func TestAppValidate(t *testing.T) {
	for _, tc := range []struct {
		a    App
		want string
	}{
		{App{Durability: "disk"}, "durability disk needs spool_dir"},
		{App{SpoolMaxSize: 1 << 20}, "spool_max_size needs spool_dir"},
		{App{Chain: &ChainConfig{}}, "chain needs an Ed25519 private key file"},
		{App{Durability: "fast"}, `invalid durability "fast"`},
	} {
		if err := tc.a.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.a, err, tc.want)
		}
	}
	if err := (&App{Durability: "disk", SpoolDir: "/x"}).Validate(); err != nil {
		t.Error(err)
	}
}

func TestSinkConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   SinkConfig
		want string
	}{
		{"ok http", SinkConfig{Type: "http", URL: "https://h/x"}, ""},
		{"bad scheme", SinkConfig{Type: "http", URL: "ftp://h"}, "invalid http sink url"},
		{"credentials not echoed", SinkConfig{Type: "http", URL: "ftp://user:pw@h"}, "ftp://h"},
		{"nats wildcard", SinkConfig{Type: "nats", URL: "nats://x", Subject: "a.*"}, "invalid nats subject"},
		{"file path", SinkConfig{Type: "file"}, "file sink needs a path"},
		{"type", SinkConfig{Type: "kafka"}, `invalid sink type "kafka"`},
		{"negative retries", SinkConfig{Type: "file", Path: "/x", MaxRetries: -1}, "invalid max_retries"},
		{"on_full", SinkConfig{Type: "file", Path: "/x", OnFull: "later"}, `invalid on_full "later"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sc.validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "pw") {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDefaultNamesHideCredentials(t *testing.T) {
	sc := SinkConfig{Type: "http", URL: "https://u:secret@audit.example/hook?token=abc"}
	if n := sc.defaultName(); n != "http:https://audit.example/hook" {
		t.Fatal(n)
	}
	sc = SinkConfig{Type: "nats", URL: "nats://u:secret@n1:4222,nats://n2", Subject: "a"}
	if n := sc.defaultName(); n != "nats:nats://n1:4222/a" {
		t.Fatal(n)
	}
}

func TestStatsAndRecent(t *testing.T) {
	rc := newReceiver(t)
	w := startWorker(t, workerConfig{BatchSize: 1, FlushInterval: time.Millisecond}, newHTTPSink(rc.srv.URL, nil, time.Second), nil)
	a := &App{workers: []*worker{w}}
	for i := 0; i < 3; i++ {
		a.Record(testEvent(i))
	}
	waitFor(t, "sent", func() bool { return w.m.sentN.Load() == 3 })
	var found bool
	for _, s := range Stats() {
		if s.Name == w.cfg.Name {
			found = true
			if s.Enqueued != 3 || s.Sent != 3 || s.QueueSize != 65536 {
				t.Fatalf("stats %+v", s)
			}
		}
	}
	if !found {
		t.Fatal("sink missing from Stats")
	}
	got := Recent(2)
	if len(got) != 2 || got[0].RequestID != "id-2" || got[1].RequestID != "id-1" {
		t.Fatalf("Recent = %+v", got)
	}
}
