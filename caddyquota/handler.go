package caddyquota

import (
	"errors"
	"fmt"
	"net"
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
	"github.com/apigate/gateway/internal/fieldedits"
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
// Retry-After and an application/problem+json body with the members
// error ("quota_exceeded"), plan, window and reset (or, with
// handle_errors, through the site's error routes).
// Every answer carries the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers.
//
// It runs after the identity sources and the other duties (its
// directive is ordered after permission), so that requests they refuse
// are not counted. A request whose key resolves empty (no identity
// source before the handler, or a placeholder nothing set) is refused
// with 500: the config's mistake, not the client's.
type Handler struct {
	// Key is the consumer key, with placeholders: the count is per key
	// and plan. Default: {http.auth.user.id}.
	Key string `json:"key,omitempty"`

	// Plan, when set, is the plan of every request through this handler,
	// whatever the consumer's own (a route with its own quota): a plan
	// of the quota global option, or, with Limits, this handler's own.
	Plan string `json:"plan,omitempty"`

	// Limits make Plan this handler's own plan, counted per key like
	// any plan: a rate limit of the route ("20/10s", "100/minute",
	// "1000/day"; see ParseLimit). Its name is not one of the quota
	// global option's plans. With a fleet (the option's, or Counts') the
	// limit holds for the fleet: at most the limit is admitted in any
	// window while NATS answers.
	Limits []string `json:"limits,omitempty"`

	// DryRun counts and reports (RateLimit fields, metrics, audit
	// decision "would_deny") but refuses nothing.
	DryRun bool `json:"dry_run,omitempty"`

	// Counts keeps the counts of a handler with its own Limits apart
	// from the quota app's: in a store of their own, shared by a fleet
	// when Counts.Fleet is set. The docker app sets it for the routes of
	// rate_limit labels. Default: the quota app's store and fleet.
	Counts *Counts `json:"counts,omitempty"`

	app     *App
	own     *ownCounts
	forced  *Plan
	label   *identity.PlanLabel // forced's, when it is the handler's own
	keyName string              // Key is the single placeholder {keyName}
	// keyFrom is where consumerKey reads a single-placeholder key
	// without the replacer's chain of providers: keyRemoteHost, or
	// keyVar (keyName is then the var's name); keyReplacer otherwise
	keyFrom keyFrom
	// forcedCounts is counters[forced.Name] (a handler with a plan)
	forcedCounts *decisionCounters
	// forcedPlaceholder answers http.quota.plan for forced: added to
	// the request's replacer instead of a write into its map
	forcedPlaceholder caddy.ReplacerFunc
	decider           *identity.Decider
	logger            *zap.Logger
	counters          map[string]*decisionCounters
	none              *decisionCounters
	lastErr           *errorLog
	emptyKey          *errorLog // the last log of an empty key
	// emptyReason is the detail of the 500 when the key resolves empty
	emptyReason string
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
	h.emptyReason = "quota key resolved empty: " + h.Key + " has no value for this request"
	h.compileKey()
	h.decider = identity.NewDecider("quota", "")
	h.none = newDecisionCounters("")
	h.counters = map[string]*decisionCounters{}
	if len(h.Limits) > 0 {
		p, err := ownPlan(h.Plan, h.Limits)
		if err != nil {
			return err
		}
		h.forced, h.label = p, identity.NewPlanLabel(p.Name)
		h.counters[p.Name] = newDecisionCounters(p.Name)
	}
	if h.Counts != nil {
		if h.forced == nil {
			return errors.New("counts needs the handler's own plan: plan <name> and limits")
		}
		own, err := newOwnCounts(ctx, h.Counts, h.forced)
		if err != nil {
			return err
		}
		h.own = own
		h.setForced()
		return nil
	}
	var app any
	var err error
	if h.forced != nil {
		// its own plan: the app keeps the counts (an app without plans
		// when the config has no quota global option)
		app, err = ctx.App("quota")
	} else {
		app, err = ctx.AppIfConfigured("quota")
		if errors.Is(err, caddy.ErrNotConfigured) {
			return errors.New("the quota handler needs the quota global option, which defines the plans, or a plan of its own (plan <name> <n>/<window>...)")
		}
	}
	if err != nil {
		return err
	}
	h.app = app.(*App)
	switch {
	case h.forced != nil:
		if h.app.plans[h.Plan] != nil {
			return fmt.Errorf("invalid plan %q: the quota global option has a plan of that name; name the handler's own plan otherwise", h.Plan)
		}
		if err := h.app.registerOwn(h.forced); err != nil {
			return err
		}
	case h.Plan != "":
		if h.forced = h.app.plans[h.Plan]; h.forced == nil {
			return fmt.Errorf("invalid plan %q: no such plan in the quota global option (plans: %s)", h.Plan, strings.Join(h.app.planNames(), ", "))
		}
	case h.app.defaultPlan == nil:
		return errors.New("the quota handler has no plan: the quota global option defines none; give the handler its own (plan <name> <n>/<window>...)")
	}
	for name := range h.app.plans {
		h.counters[name] = newDecisionCounters(name)
	}
	h.setForced()
	return nil
}

// setForced keeps what a request of the handler's forced plan needs at
// hand: its counters and its placeholder.
func (h *Handler) setForced() {
	if h.forced == nil {
		return
	}
	h.forcedCounts = h.counters[h.forced.Name]
	name := h.forced.nameValue
	if name == nil {
		name = h.forced.Name
	}
	h.forcedPlaceholder = func(key string) (any, bool) {
		if key == PlaceholderPlan {
			return name, true
		}
		return nil, false
	}
}

// Cleanup releases the handler's own counts (with Counts).
func (h *Handler) Cleanup() error {
	if h.own != nil {
		return h.own.release()
	}
	return nil
}

// ownPlan compiles a handler's own plan.
func ownPlan(name string, limits []string) (*Plan, error) {
	if name == "" {
		return nil, errors.New("limits need the plan's name: plan <name> <n>/<window>...")
	}
	ls := make([]Limit, 0, len(limits))
	for _, s := range limits {
		l, err := ParseLimit(s)
		if err != nil {
			return nil, fmt.Errorf("plan %s: %v", name, err)
		}
		ls = append(ls, l)
	}
	return NewPlan(name, ls)
}

// acquire decides a request in the handler's counts (its own, or the
// app's) and returns the store it decided in.
func (h *Handler) acquire(plan *Plan, key string, now time.Time) (*Store, Decision, error) {
	if h.own != nil {
		return h.own.acquire(plan, key, now, h.DryRun)
	}
	st, err := h.app.store()
	if err != nil {
		return nil, Decision{}, err
	}
	d, err := st.AcquireAt(plan, key, now, h.DryRun)
	return st, d, err
}

// now is the time a request is counted at.
func (h *Handler) now() time.Time {
	if h.app != nil {
		return h.app.clock()
	}
	return time.Now()
}

// location is the zone of the calendar windows the handler counts in.
func (h *Handler) location() *time.Location {
	if h.app != nil {
		return h.app.cal.Location()
	}
	return time.UTC
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.Key != "" && strings.TrimSpace(h.Key) == "" {
		return errors.New("invalid key: blank")
	}
	return checkKey(h.Key)
}

// checkKey refuses a key with a placeholder under http.auth. that no
// identity source sets (a typo such as {http.auth.usr.id}): it would
// resolve empty on every request.
func checkKey(key string) error { return identity.CheckAuthPlaceholders("key", key) }

// Where consumerKey reads a key of one placeholder (keyFrom).
type keyFrom uint8

const (
	keyReplacer   keyFrom = iota // the request's replacer
	keyRemoteHost                // {http.request.remote.host}: the request's RemoteAddr
	keyVar                       // {http.vars.<name>}: the request's vars
)

const (
	remoteHostPlaceholder = "http.request.remote.host"
	varsPrefix            = "http.vars."
)

// compileKey finds how consumerKey reads Key: a single placeholder by
// its name (keyName), the keys of rate limits without the replacer
// (keyFrom).
func (h *Handler) compileKey() {
	h.keyName, h.keyFrom = "", keyReplacer
	if !strings.HasPrefix(h.Key, "{") || !strings.HasSuffix(h.Key, "}") || strings.Count(h.Key, "{") != 1 || strings.Count(h.Key, "}") != 1 {
		return
	}
	h.keyName = h.Key[1 : len(h.Key)-1]
	switch {
	case h.keyName == remoteHostPlaceholder:
		h.keyFrom = keyRemoteHost
	case strings.HasPrefix(h.keyName, varsPrefix) && len(h.keyName) > len(varsPrefix):
		h.keyFrom, h.keyName = keyVar, h.keyName[len(varsPrefix):]
	}
}

// consumerKey evaluates the key for a request. The keys of rate limits
// ({remote_host}, {http.vars.client_ip}) are read where Caddy's HTTP
// placeholders read them, with the same result (TestConsumerKeyDirect),
// without a walk through the replacer's providers (about 1,000
// instructions a request on the fast path, callgrind).
func (h *Handler) consumerKey(r *http.Request, repl *caddy.Replacer) string {
	switch h.keyFrom {
	case keyRemoteHost:
		if r.TLS != nil && !r.TLS.HandshakeComplete {
			return "" // as Caddy: no trusted address before the handshake ends
		}
		return remoteHost(r.RemoteAddr)
	case keyVar:
		switch v := caddyhttp.GetVar(r.Context(), h.keyName).(type) {
		case string:
			return v
		case nil:
			return ""
		default:
			return caddy.ToString(v)
		}
	}
	if repl == nil {
		return ""
	}
	if h.keyName != "" {
		v, _ := repl.GetString(h.keyName)
		return v
	}
	return repl.ReplaceAll(h.Key, "")
}

// remoteHost is Caddy's {http.request.remote.host} of a remote address:
// the host of host:port, else the address whole (a unix socket's path).
func remoteHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// RequestFieldEdits reports that ServeHTTP changes no request header field
// (fieldedits.Declarer): it reads the consumer's key and writes response
// fields only.
func (h *Handler) RequestFieldEdits() []string { return nil }

// ServeHTTP counts the request and admits or refuses it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	key := h.consumerKey(r, repl)
	if key == "" {
		return h.keyEmpty(w, r)
	}
	plan := h.forced
	if plan == nil {
		id, _ := identity.FromRequest(r)
		plan = h.app.planFor(h, id)
	}
	now := h.now()
	st, d, err := h.acquire(plan, key, now)
	if err != nil {
		return h.unavailable(w, r, plan, err)
	}
	if h.label != nil {
		identity.SetPlan(r, h.label)
	} else {
		identity.SetPlan(r, h.app.labels[plan.Name])
	}
	var c *decisionCounters
	switch {
	case repl == nil:
	case plan == h.forced:
		repl.Map(h.forcedPlaceholder) // (no write into the replacer's map)
	case plan.nameValue == nil: // a Plan not made by NewPlan
		repl.Set(PlaceholderPlan, plan.Name)
	default:
		repl.Set(PlaceholderPlan, plan.nameValue)
	}
	if plan == h.forced {
		c = h.forcedCounts
	} else {
		c = h.counters[plan.Name]
	}
	if len(plan.Limits) > 0 {
		day, month := st.Periods(now)
		hdr := w.Header()
		hdr["Ratelimit-Policy"] = plan.PolicyField(day, month)
		hdr["Ratelimit"] = plan.RateLimitField(&d, now)
	}
	switch {
	case !d.Over:
		c.admitted.Inc()
		h.countConsumer(key, plan.Name, "admitted")
		return next.ServeHTTP(w, r)
	case d.Admitted: // dry run
		c.wouldRefuse.Inc()
		h.countConsumer(key, plan.Name, "would_refuse")
		identity.PassDenied(h.logger, r, h.decider, h.reason(plan, &d), zap.String("plan", plan.Name))
		return next.ServeHTTP(w, r)
	}
	c.refused.Inc()
	h.countConsumer(key, plan.Name, "refused")
	return h.refuse(w, r, repl, plan, &d, now)
}

// keyEmpty answers 500 for a request whose key resolved empty: a config
// mistake, not the client's (never a 401 blaming its credential). The
// detail and the log name the key; the log says whether the request has
// an identity (then nothing sets the key's placeholder) or not (then no
// identity source ran before the handler).
func (h *Handler) keyEmpty(w http.ResponseWriter, r *http.Request) error {
	h.none.unidentified.Inc()
	identity.SetDenialBy(r, h.decider, h.emptyReason)
	if h.emptyKey.due() {
		id, ok := identity.FromRequest(r)
		plan := h.forced
		if plan == nil && h.app != nil {
			plan = h.app.planFor(h, id)
		}
		fields := []zap.Field{zap.String("key", h.Key), zap.Bool("identity", ok)}
		if plan != nil {
			fields = append(fields, zap.String("plan", plan.Name))
		}
		msg := "quota key resolved empty: refusing with 500; the request has no identity (is an identity source before quota in the route?)"
		if ok {
			msg = "quota key resolved empty: refusing with 500; the request has an identity, but no module set the key's placeholders"
		}
		h.logger.Error(msg, fields...)
	}
	return deny.Respond(w, r, http.StatusInternalServerError, "quota_key_empty", h.emptyReason)
}

// countConsumer counts a decision per consumer (the app's
// consumer_metrics), not for a handler's own counts.
func (h *Handler) countConsumer(consumer, plan, decision string) {
	if h.app != nil {
		h.app.countConsumer(consumer, plan, decision)
	}
}

// reason is the client-safe reason of a refusal, for audit and logs.
func (h *Handler) reason(plan *Plan, d *Decision) string {
	l := plan.Limits[d.Binding]
	if d.Late {
		return "quota: the lease of " + plan.Name + " " + l.String() + " waits for another gateway's read of the fleet's counts (try again in a moment)"
	}
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
	window := plan.Limits[d.Binding].WindowName()
	reset := d.Reset().In(h.location()).Format(time.RFC3339)
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
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ fieldedits.Declarer         = (*Handler)(nil)
)
