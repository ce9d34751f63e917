package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// The helper services run as separate processes (subcommands of this tool),
// pinned with the load generator to core 0, so the gateway under test has
// core 1 to itself.

// serveAuth is the small auth service that nginx auth_request and Caddy
// forward_auth call: GET /verify checks the bearer token (HS256 or RS256,
// signature, exp, iss, aud) on every call, as a typical stand-alone auth
// service does, and answers 200 with X-User-Id, or 401.
func serveAuth(addr string, keys *Keys) error {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		sub, err := keys.Verify(tok, time.Now())
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("X-User-Id", sub)
		w.WriteHeader(http.StatusOK)
	})
	return listen(addr, h)
}

// servePermission is the permission service: POST /check with the
// gateway's JSON body; it decodes the body (as a real service would) and
// allows every request. It sends no Cache-Control, so the gateway's own
// cache_ttl applies.
func servePermission(addr string) error {
	var calls atomic.Int64
	h := http.NewServeMux()
	h.HandleFunc("/check", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Subject string   `json:"subject"`
			Roles   []string `json:"roles"`
			Method  string   `json:"method"`
			Path    string   `json:"path"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"allow":true}`))
	})
	// GET /forward is the same check for a proxy that can only ask with
	// the request's own headers (Traefik's ForwardAuth): the method and
	// path in X-Forwarded-Method and X-Forwarded-Uri, the user in X-User-Id
	// (which the auth service answered and the proxy copied).
	h.HandleFunc("/forward", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Forwarded-Uri") == "" || r.Header.Get("X-User-Id") == "" {
			http.Error(w, "no forwarded request or user", http.StatusForbidden)
			return
		}
		calls.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	h.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"calls":%d}`, calls.Load())
	})
	return listen(addr, h)
}

// serveAuditReceiver is the audit webhook: POST /events takes a JSON array
// of events (or one event) and counts them.
func serveAuditReceiver(addr string) error {
	var events, posts atomic.Int64
	marker := []byte(`"request_id"`)
	h := http.NewServeMux()
	h.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read error", http.StatusBadRequest)
			return
		}
		posts.Add(1)
		events.Add(int64(bytes.Count(b, marker)))
		w.WriteHeader(http.StatusOK)
	})
	h.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"events":%d,"posts":%d}`, events.Load(), posts.Load())
	})
	return listen(addr, h)
}

func listen(addr string, h http.Handler) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	fmt.Fprintf(os.Stderr, "listening on %s\n", addr)
	return srv.ListenAndServe()
}
