package caddyquota

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/deny"
)

// DefaultKey is the consumer key of a quota handler without one: the
// verified identity's subject (jwt_auth, api_key, client_cert_auth).
const DefaultKey = "{http.auth.user.id}"

// Placeholders the handler sets, for handle_errors and logs.
const (
	// PlaceholderPlan is the consumer's plan (every request).
	PlaceholderPlan = "http.quota.plan"
	// PlaceholderWindow is the window that refused: minute, hour, day or
	// month.
	PlaceholderWindow = "http.quota.window"
	// PlaceholderReset is when that window admits again (RFC 3339, in
	// the quota's time zone).
	PlaceholderReset = "http.quota.reset"
)

// Handler counts each request of a consumer against the consumer's plan
// (see App) and refuses it when a limit of the plan is reached: 429 with
// Retry-After and the JSON {"error":"quota_exceeded","plan","window",
// "reset"} (or, with handle_errors, through the site's error routes).
// Every answer carries the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers.
//
// It runs after the identity sources and the other duties (its
// directive is ordered after permission), so that requests they refuse
// are not counted. A request without a consumer key (no identity) is
// refused with 401.
type Handler struct {
	// Key is the consumer key, with placeholders: the count is per key
	// and plan. Default: {http.auth.user.id}.
	Key string `json:"key,omitempty"`

	// Plan, when set, is the plan of every request through this handler,
	// whatever the consumer's own (a route with its own quota).
	Plan string `json:"plan,omitempty"`

	// DryRun counts and reports (RateLimit fields, metrics, audit
	// decision "would_deny") but refuses nothing.
	DryRun bool `json:"dry_run,omitempty"`

	app      *App
	forced   *Plan
	keyName  string // Key is the single placeholder {keyName}
	decider  *identity.Decider
	logger   *zap.Logger
	counters map[string]*decisionCounters
	none     *decisionCounters
	lastErr  *errorLog
	emptyKey *errorLog // the last log of an empty key
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.quota",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision finds the quota app of the config.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.lastErr, h.emptyKey = new(errorLog), new(errorLog)
	if h.Key == "" {
		h.Key = DefaultKey
	}
	if strings.HasPrefix(h.Key, "{") && strings.HasSuffix(h.Key, "}") && strings.Count(h.Key, "{") == 1 && strings.Count(h.Key, "}") == 1 {
		h.keyName = h.Key[1 : len(h.Key)-1]
	}
	app, err := ctx.AppIfConfigured("quota")
	if errors.Is(err, caddy.ErrNotConfigured) {
		return errors.New("the quota handler needs the quota global option, which defines the plans")
	}
	if err != nil {
		return err
	}
	h.app = app.(*App)
	if h.Plan != "" {
		if h.forced = h.app.plans[h.Plan]; h.forced == nil {
			return fmt.Errorf("invalid plan %q: no such plan in the quota global option (plans: %s)", h.Plan, strings.Join(h.app.planNames(), ", "))
		}
	}
	h.decider = identity.NewDecider("quota", "")
	h.counters = make(map[string]*decisionCounters, len(h.app.plans))
	for name := range h.app.plans {
		h.counters[name] = newDecisionCounters(name)
	}
	h.none = newDecisionCounters("")
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.Key != "" && strings.TrimSpace(h.Key) == "" {
		return errors.New("invalid key: blank")
	}
	return nil
}

// consumerKey evaluates the key for a request.
func (h *Handler) consumerKey(repl *caddy.Replacer) string {
	if repl == nil {
		return ""
	}
	if h.keyName != "" {
		v, _ := repl.GetString(h.keyName)
		return v
	}
	return repl.ReplaceAll(h.Key, "")
}

// ServeHTTP counts the request and admits or refuses it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	key := h.consumerKey(repl)
	if key == "" {
		// a config mistake, not the client's: the key's placeholder has
		// no value here (no identity source before the handler, say)
		h.none.unidentified.Inc()
		const reason = "quota key resolved empty"
		identity.SetDenialBy(r, h.decider, reason)
		if h.emptyKey.due() {
			h.logger.Error("quota key resolved empty: refusing with 500; the key's placeholders have no value for this request (is an identity source before quota in the route?)",
				zap.String("key", h.Key))
		}
		return deny.Respond(w, r, http.StatusInternalServerError, "quota_key_empty", reason)
	}
	id, _ := identity.FromRequest(r)
	plan := h.app.planFor(h, id)
	st, err := h.app.store()
	now := h.app.clock()
	var d Decision
	if err == nil {
		d, err = st.AcquireAt(plan, key, now, h.DryRun)
	}
	if err != nil {
		return h.unavailable(w, r, plan, err)
	}
	identity.SetPlan(r, h.app.labels[plan.Name])
	if repl != nil {
		if plan.nameValue == nil { // a Plan not made by NewPlan
			repl.Set(PlaceholderPlan, plan.Name)
		} else {
			repl.Set(PlaceholderPlan, plan.nameValue)
		}
	}
	if len(plan.Limits) > 0 {
		day, month := st.Periods(now)
		hdr := w.Header()
		hdr["Ratelimit-Policy"] = plan.PolicyField(day, month)
		var buf [192]byte
		hdr["Ratelimit"] = []string{string(plan.AppendRateLimitField(buf[:0], &d, now))}
	}
	c := h.counters[plan.Name]
	switch {
	case !d.Over:
		c.admitted.Inc()
		h.app.countConsumer(key, plan.Name, "admitted")
		return next.ServeHTTP(w, r)
	case d.Admitted: // dry run
		c.wouldRefuse.Inc()
		h.app.countConsumer(key, plan.Name, "would_refuse")
		identity.PassDenied(h.logger, r, h.decider, h.reason(plan, &d), zap.String("plan", plan.Name))
		return next.ServeHTTP(w, r)
	}
	c.refused.Inc()
	h.app.countConsumer(key, plan.Name, "refused")
	return h.refuse(w, r, repl, plan, &d, now)
}

// reason is the client-safe reason of a refusal, for audit and logs.
func (h *Handler) reason(plan *Plan, d *Decision) string {
	l := plan.Limits[d.Binding]
	if d.Share {
		return "quota exceeded: this gateway's share of " + plan.Name + " " + l.String() + " (the fleet's counts are unavailable)"
	}
	return "quota exceeded: " + plan.Name + " " + l.String()
}

// QuotaExceeded is what a 429's problem (application/problem+json, see
// deny) has beside the standard members, for clients that decode it: the
// members of the JSON body from before problem+json, with the same values.
type QuotaExceeded struct {
	Error  string `json:"error"`
	Plan   string `json:"plan"`
	Window string `json:"window"`
	Reset  string `json:"reset"`
}

// refuse answers 429 for the binding window of d.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, plan *Plan, d *Decision, now time.Time) error {
	window := plan.Limits[d.Binding].Unit.String()
	reset := d.Reset().In(h.app.cal.Location()).Format(time.RFC3339)
	reason := h.reason(plan, d)
	w.Header().Set("Retry-After", strconv.FormatInt(d.RetryAfter(now), 10))
	identity.SetDenialBy(r, h.decider, reason)
	if repl != nil {
		repl.Set(PlaceholderWindow, window)
		repl.Set(PlaceholderReset, reset)
	}
	if ce := h.logger.Check(zapcore.DebugLevel, "request refused: quota exceeded"); ce != nil {
		ce.Write(zap.String("plan", plan.Name), zap.String("window", window), zap.String("reset", reset))
	}
	p := deny.New(http.StatusTooManyRequests, "quota_exceeded", reason).
		With("plan", plan.Name).With("window", window).With("reset", reset)
	return deny.RespondProblem(w, r, p, reason)
}

// unavailable answers 503 when the counts cannot be kept (the store's
// directory cannot be written): nothing is admitted uncounted.
func (h *Handler) unavailable(w http.ResponseWriter, r *http.Request, plan *Plan, err error) error {
	if h.lastErr.due() {
		h.logger.Error("quota counts unavailable: refusing with 503", zap.String("plan", plan.Name), zap.Error(err))
	}
	h.counters[plan.Name].unavailable.Inc()
	const reason = "quota counts unavailable"
	identity.SetDenialBy(r, h.decider, reason)
	w.Header().Set("Retry-After", "1")
	return deny.Respond(w, r, http.StatusServiceUnavailable, "quota_unavailable", reason)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
