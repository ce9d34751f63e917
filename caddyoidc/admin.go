package caddyoidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// SessionsPath is the admin API path of the sessions.
const SessionsPath = "/gateway/sessions"

// AdminAPI is the admin API's sessions endpoint:
//
//	GET    /gateway/sessions            the sessions of each login, counted
//	DELETE /gateway/sessions?sub=<sub>  revoke every session of a subject, fleet-wide
type AdminAPI struct{}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.oidc_sessions",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Routes returns the sessions route.
func (AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: SessionsPath, Handler: caddy.AdminHandlerFunc(serveSessions)}}
}

// LoginCounts are one login's figures in GET /gateway/sessions.
type LoginCounts struct {
	Issuer   string `json:"issuer"`
	ClientID string `json:"client_id"`
	Counts
}

// Revoked is the answer of DELETE /gateway/sessions.
type Revoked struct {
	Subject string `json:"sub"`
	// Sessions is how many sessions of the subject were found and ended.
	Sessions int `json:"sessions"`
}

func serveSessions(w http.ResponseWriter, r *http.Request) error {
	var states []*loginState
	logins.Range(func(_, v any) bool {
		states = append(states, v.(*loginState))
		return true
	})
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var doc any
	switch r.Method {
	case http.MethodGet:
		out := []LoginCounts{}
		for _, l := range states {
			s := l.current.Load()
			if s == nil {
				continue
			}
			c, err := s.Count(ctx)
			if err != nil {
				return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: err}
			}
			out = append(out, LoginCounts{Issuer: l.issuer, ClientID: l.clientID, Counts: c})
		}
		sort.Slice(out, func(i, j int) bool {
			return out[i].Issuer < out[j].Issuer || out[i].Issuer == out[j].Issuer && out[i].ClientID < out[j].ClientID
		})
		doc = map[string]any{"logins": out}
	case http.MethodDelete:
		sub := r.URL.Query().Get("sub")
		if sub == "" {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: errors.New("DELETE " + SessionsPath + " needs ?sub=<subject>")}
		}
		res := Revoked{Subject: sub}
		var errs []error
		for _, l := range states {
			s := l.current.Load()
			if s == nil {
				continue
			}
			n, err := s.RevokeSubject(ctx, l.issuer, sub)
			res.Sessions += n
			revocationsVec.WithLabelValues("admin").Add(float64(n))
			if err != nil {
				errs = append(errs, err)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: fmt.Errorf("revoked %d sessions, then: %w", res.Sessions, err)}
		}
		doc = res
	default:
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed: GET or DELETE %s", r.Method, SessionsPath)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// Interface guard
var _ caddy.AdminRouter = AdminAPI{}
