package caddydocker

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/apigate/gateway/internal/deny"
)

func init() {
	caddy.RegisterModule(Answer{})
}

// Answer is the handler of the gateway's own answers in discovered routes
// (`docker_answer` in their JSON): 404 no_route, 503 no_healthy_upstream,
// 503 discovery_starting, each the problem every refusal of the gateway is
// (application/problem+json, internal/deny), with the request's path as
// its instance. It always answers, whatever the site's handle_errors (as
// the static answers it replaces did): these answers are the discovery's
// own, not a duty's refusal.
type Answer struct {
	// Status is the answer's status.
	Status int `json:"status"`
	// Error is the kind of the answer (deny.Kinds): no_route,
	// no_healthy_upstream, discovery_starting.
	Error string `json:"error"`
	// Detail is the problem's detail.
	Detail string `json:"detail,omitempty"`
	// RetryAfter, in seconds, is sent as Retry-After when positive.
	RetryAfter int `json:"retry_after,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Answer) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.docker_answer",
		New: func() caddy.Module { return new(Answer) },
	}
}

// ServeHTTP answers; it never calls next.
func (a *Answer) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if a.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(a.RetryAfter))
	}
	deny.Write(w, r, deny.New(a.Status, a.Error, a.Detail))
	return nil
}

// DescribeAnswer is the dashboard's short description of an answer's
// config: its status and kind.
func DescribeAnswer(raw json.RawMessage) string {
	var a Answer
	if json.Unmarshal(raw, &a) != nil {
		return ""
	}
	return strconv.Itoa(a.Status) + " " + a.Error
}

// problemAnswer is the JSON of an Answer handler in a route.
func problemAnswer(status int, code, detail string, retryAfter int) map[string]any {
	h := map[string]any{"handler": "docker_answer", "status": status, "error": code, "detail": detail}
	if retryAfter > 0 {
		h["retry_after"] = retryAfter
	}
	return h
}

// The answers' details.
const (
	NoRouteDetail           = "no route matches the request"
	NoHealthyUpstreamDetail = "no replica of the service may take requests now"
	DiscoveryStartingDetail = "the gateway has no container list yet"
)

// Interface guards
var _ caddyhttp.MiddlewareHandler = (*Answer)(nil)
