// Package caddyopenapi is the openapi handler: it makes an API's OpenAPI
// document (3.0 or 3.1, YAML or JSON, $refs across files) the gateway's
// contract for that API. Requests whose parameters or body do not match
// the operation they call are refused with 400 (415 for an undeclared
// content type) as application/problem+json (RFC 9457) through Caddy's
// error routes; operations the document does not declare can be refused
// (404, 405); an operation's security requirements can be enforced
// against the identity the gateway verified; responses can be checked
// too. In dry run, violations are recorded (audit, the summary at
// GET /gateway/openapi, the dashboard) and requests pass.
package caddyopenapi

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/apigate/gateway/identity"
	"github.com/apigate/gateway/internal/deny"
	"github.com/apigate/gateway/internal/fieldedits"
	"github.com/apigate/gateway/internal/filewatch"
)

func init() {
	caddy.RegisterModule(OpenAPI{})
}

// Modes of request and response validation.
const (
	ModeEnforce = "enforce"
	ModeDryRun  = "dry_run"
	ModeOff     = "off"
)

// Modes for undeclared operations.
const (
	UndeclaredPass   = "pass"
	UndeclaredReject = "reject"
)

// Defaults.
const (
	DefaultMaxRequestBody  = 10 << 20
	DefaultMaxResponseBody = 1 << 20
	DefaultCheckInterval   = time.Second
	DefaultRealm           = "gateway"
)

// OpenAPI is an HTTP handler that checks requests (and optionally
// responses) against an OpenAPI document.
type OpenAPI struct {
	// Spec is the path of the OpenAPI document (YAML or JSON; 3.0.x or
	// 3.1.x); a relative path is from Caddy's working directory, as
	// every file path of a config. Files its $refs name are read
	// relative to it; nothing is
	// fetched from the network. Placeholders known at load time ({env.*})
	// are expanded. The document must load when the config loads; later
	// it is read again when it or a file it references changes, and a
	// version that then fails to load keeps the last good one (the error
	// is logged and shown in the summary).
	Spec string `json:"spec,omitempty"`

	// Request is how requests are checked: "enforce" (the default:
	// refuse what does not match), "dry_run" (record violations in the
	// audit trail and the summary, let the request pass) or "off".
	// The checks of undeclared and enforce_security follow it.
	Request string `json:"request,omitempty"`

	// Response is how responses are checked: "off" (the default),
	// "enforce" (a response that does not match is replaced by 502) or
	// "dry_run" (recorded, passed on).
	Response string `json:"response,omitempty"`

	// Undeclared is what happens to a request no operation of the
	// document matches: "pass" (the default) or "reject" (404 for an
	// undeclared path, 405 with Allow for an undeclared method).
	Undeclared string `json:"undeclared,omitempty"`

	// EnforceSecurity checks each operation's security requirements
	// against the identity an earlier handler verified (jwt_auth,
	// api_key, client_cert_auth): at least one requirement must hold,
	// with every scope it lists (OAuth 2.0, OpenID Connect) or role
	// (other schemes) in the identity's claims, decided as rbac decides.
	// No acceptable identity: 401; missing scopes or roles: 403.
	EnforceSecurity bool `json:"enforce_security,omitempty"`

	// ScopesClaim and RolesClaim are the claim paths of scopes and roles,
	// as in rbac. Default: "scope" and "roles".
	ScopesClaim string `json:"scopes_claim,omitempty"`
	RolesClaim  string `json:"roles_claim,omitempty"`

	// MaxRequestBody is the largest request body (bytes) read to be
	// validated; a longer one is refused with 413 when requests are
	// enforced (put `request_body { max_size }` before the handler to
	// refuse large bodies before they are read at all). Default: 10 MiB.
	MaxRequestBody int64 `json:"max_request_body,omitempty"`

	// MaxResponseBody is the most of a response body held (enforce) or
	// copied (dry_run) to be validated; a longer response passes
	// unchecked and is counted as such. Default: 1 MiB.
	MaxResponseBody int64 `json:"max_response_body,omitempty"`

	// CheckInterval is how often (at most) a request checks the
	// document's files for changes. Default: 1s.
	CheckInterval caddy.Duration `json:"check_interval,omitempty"`

	// Realm is the realm of the WWW-Authenticate challenge of a 401.
	// Default: gateway.
	Realm string `json:"realm,omitempty"`

	// AnnotationFormats are formats the document uses that neither JSON
	// Schema nor OpenAPI defines ("uriref", "phone"): their values are
	// not checked. Any other format the gateway does not know fails the
	// load, naming the file, line and JSON pointer.
	AnnotationFormats []string `json:"annotation_formats,omitempty"`

	spec      *filewatch.Value[*Spec]
	path      string
	summary   *specSummary
	logger    *zap.Logger
	decider   *identity.Decider
	challenge string
	reqDry    bool
	reqOff    bool
	respOn    bool
	respDry   bool
}

// CaddyModule returns the Caddy module information.
func (OpenAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.openapi",
		New: func() caddy.Module { return new(OpenAPI) },
	}
}

// Provision loads and compiles the document; a document that does not
// load fails the config, with the file, line and JSON pointer of what is
// wrong.
func (h *OpenAPI) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.Request == "" {
		h.Request = ModeEnforce
	}
	if h.Response == "" {
		h.Response = ModeOff
	}
	if h.Undeclared == "" {
		h.Undeclared = UndeclaredPass
	}
	if h.MaxRequestBody == 0 {
		h.MaxRequestBody = DefaultMaxRequestBody
	}
	if h.MaxResponseBody == 0 {
		h.MaxResponseBody = DefaultMaxResponseBody
	}
	if h.CheckInterval == 0 {
		h.CheckInterval = caddy.Duration(DefaultCheckInterval)
	}
	if h.Realm == "" {
		h.Realm = DefaultRealm
	}
	h.reqDry, h.reqOff = h.Request == ModeDryRun, h.Request == ModeOff
	h.respOn, h.respDry = h.Response != ModeOff, h.Response == ModeDryRun
	h.decider = identity.NewDecider("openapi", "")
	h.challenge = deny.BearerChallenge(h.Realm)

	path := caddy.NewReplacer().ReplaceKnown(h.Spec, "")
	if path == "" {
		return fmt.Errorf("spec is empty once placeholders are replaced")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("spec %q: %v", path, err)
	}
	h.path = abs
	load := func() (*Spec, []string, error) {
		s, err := Load(abs, h.ScopesClaim, h.RolesClaim, h.AnnotationFormats...)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Files, nil
	}
	w, err := filewatch.Open(load, time.Duration(h.CheckInterval), time.Now())
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	v, _, err := summaries.LoadOrNew(abs, func() (caddy.Destructor, error) {
		return &specSummary{path: abs}, nil
	})
	if err != nil {
		return err
	}
	h.summary = v.(*specSummary)
	h.summary.attach(w.Current(time.Now()), nil)
	h.summary.mu.Lock()
	h.summary.request, h.summary.response, h.summary.undeclared = h.Request, h.Response, h.Undeclared
	h.summary.mu.Unlock()
	logger, summary := h.logger, h.summary
	w.OnError = func(err error) {
		logger.Error("openapi document not reloaded; keeping the last good one", zap.String("spec", abs), zap.Error(err))
		summary.attach(nil, err)
	}
	w.OnReload = func(s *Spec) {
		summary.attach(s, nil)
		logLibraryChecks(logger, abs, s)
		logger.Info("openapi document reloaded", zap.String("spec", abs), zap.Int("operations", len(s.Operations)))
	}
	h.spec = w
	logLibraryChecks(h.logger, abs, w.Current(time.Now()))
	return nil
}

// logLibraryChecks says (at each load, and so in `caddy validate`) which
// parts of which operations the JSON Schema library validates, and why.
func logLibraryChecks(logger *zap.Logger, path string, s *Spec) {
	for _, lc := range s.LibraryChecks {
		logger.Info("openapi: validated by the JSON Schema library, not by compiled checks (slower)",
			zap.String("spec", path), zap.String("operation", lc.Operation), zap.String("part", lc.Part), zap.String("reason", lc.Reason))
	}
}

// Load reads and compiles an OpenAPI document, with the claim paths its
// security requirements are checked on ("" for rbac's defaults) and the
// formats of its own it may use unchecked.
func Load(path, scopesClaim, rolesClaim string, annotationFormats ...string) (*Spec, error) {
	s, err := compileSpec(path, annotationFormats)
	if err != nil {
		return nil, err
	}
	if err := s.compilePolicies(scopesClaim, rolesClaim); err != nil {
		return nil, err
	}
	return s, nil
}

// Validate checks the configuration.
func (h *OpenAPI) Validate() error {
	if h.Spec == "" {
		return fmt.Errorf("spec is required")
	}
	for _, m := range []struct{ name, v string }{{"request", h.Request}, {"response", h.Response}} {
		switch m.v {
		case "", ModeEnforce, ModeDryRun, ModeOff:
		default:
			return fmt.Errorf("invalid %s %q: must be enforce, dry_run or off", m.name, m.v)
		}
	}
	switch h.Undeclared {
	case "", UndeclaredPass, UndeclaredReject:
	default:
		return fmt.Errorf("invalid undeclared %q: must be pass or reject", h.Undeclared)
	}
	if h.MaxRequestBody < 0 {
		return fmt.Errorf("invalid max_request_body %d: must be positive", h.MaxRequestBody)
	}
	if h.MaxResponseBody < 0 {
		return fmt.Errorf("invalid max_response_body %d: must be positive", h.MaxResponseBody)
	}
	if h.CheckInterval < 0 {
		return fmt.Errorf("invalid check_interval %q: must be positive", time.Duration(h.CheckInterval))
	}
	return nil
}

// Cleanup leaves the document's summary (dropped with the last handler).
func (h *OpenAPI) Cleanup() error {
	if h.path != "" && h.summary != nil {
		_, err := summaries.Delete(h.path)
		return err
	}
	return nil
}

// ServeHTTP checks the request, passes it on, and checks the response.
func (h *OpenAPI) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	spec := h.spec.Latest()
	var vals pathValues
	item, op := spec.match(r.Method, r.URL.Path, &vals)
	if op == nil {
		h.summary.other.requests.Add(1)
		if h.Undeclared != UndeclaredReject || h.reqOff {
			return next.ServeHTTP(w, r)
		}
		v := Violation{Location: "path", Keyword: "paths", Message: "no path of the API matches"}
		verdict := verdictUndeclaredPath
		if item != nil {
			v = Violation{Location: "method", Keyword: "methods", Message: "must be one of " + item.allow}
			verdict = verdictUndeclaredMethod
			w.Header().Set("Allow", item.allow)
		}
		vs := []Violation{v}
		if err := h.refuse(w, r, &h.summary.other, verdict, vs); err != nil || !h.reqDry {
			return err
		}
		w.Header().Del("Allow")
		return next.ServeHTTP(w, r)
	}
	op.stats.requests.Add(1)
	if !h.reqOff {
		verdict, vs, err := h.checkRequest(r, op, &vals)
		if err != nil {
			return err
		}
		if verdict != verdictPass {
			if err := h.refuse(w, r, op.stats, verdict, vs); err != nil || !h.reqDry {
				return err
			}
			w.Header().Del("WWW-Authenticate")
		}
	}
	if !h.respOn || op.responses == nil {
		return next.ServeHTTP(w, r)
	}
	return h.serveChecked(w, r, op, next)
}

// checkRequest runs the request checks: security first (a client that
// may not call the operation learns nothing of its parameters), then
// parameters and body.
func (h *OpenAPI) checkRequest(r *http.Request, op *Operation, vals *pathValues) (verdict, []Violation, error) {
	if h.EnforceSecurity && op.security != nil {
		id, _ := identity.FromRequest(r)
		switch res, req := checkSecurity(op.security, id); res {
		case securityNoIdentity:
			return verdictUnauthenticated, []Violation{{Location: "security", Keyword: "security", Message: "requires an identity for " + req.text}}, nil
		case securityInsufficient:
			kind := "scopes"
			if !req.parts[0].scheme.scoped() {
				kind = "roles"
			}
			return verdictForbidden, []Violation{{Location: "security", Keyword: kind, Message: "requires " + req.text}}, nil
		}
	}
	vs := op.checkParams(r, vals, nil)
	bodyVerdict, vs, err := op.checkBody(r, h.MaxRequestBody, vs)
	if err != nil {
		if _, ok := err.(caddyhttp.HandlerError); ok {
			return verdictPass, nil, err
		}
		return verdictPass, nil, caddyhttp.Error(http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err))
	}
	switch {
	case bodyVerdict != verdictPass:
		return bodyVerdict, vs, nil
	case len(vs) > 0:
		return verdictInvalid, vs, nil
	}
	return verdictPass, nil, nil
}

// Problem is the RFC 9457 body of a refusal, for clients that decode it
// (deny.Problem writes it).
type Problem struct {
	Type     string      `json:"type"`
	Title    string      `json:"title"`
	Status   int         `json:"status"`
	Detail   string      `json:"detail,omitempty"`
	Instance string      `json:"instance"`
	Errors   []Violation `json:"errors"`
}

// The problem types and titles, and the client-safe reasons audit
// records, per verdict.
var problems = [...]struct{ typ, title, reason string }{
	verdictInvalid:          {"urn:apigate:openapi:invalid-request", "Request does not match the API description", "invalid request"},
	verdictUnsupportedMedia: {"urn:apigate:openapi:unsupported-media-type", "Content type not declared for this operation", "unsupported media type"},
	verdictTooLarge:         {"urn:apigate:openapi:body-too-large", "Request body too large to validate", "request body too large"},
	verdictUndeclaredPath:   {"urn:apigate:openapi:undeclared-path", "Path not declared by the API description", "undeclared path"},
	verdictUndeclaredMethod: {"urn:apigate:openapi:undeclared-method", "Method not declared for this path", "undeclared method"},
	verdictUnauthenticated:  {"urn:apigate:openapi:unauthenticated", "Authentication required by the API description", "missing identity"},
	verdictForbidden:        {"urn:apigate:openapi:insufficient-scope", "Scopes or roles required by the API description are missing", "missing scope"},
	verdictBadResponse:      {"urn:apigate:openapi:invalid-response", "Upstream response does not match the API description", "invalid response"},
}

// problem returns the problem of a refusal: the gateway's shape (deny),
// with the violations as the extension member errors.
func problem(v verdict, vs []Violation) *deny.Problem {
	p := &deny.Problem{Type: problems[v].typ, Title: problems[v].title, Status: verdictStatus[v]}
	if n := len(vs); n > 1 {
		p.Detail = strconv.Itoa(n) + " violations"
	} else {
		p.Detail = "1 violation"
	}
	if len(vs) > maxViolations {
		vs = vs[:maxViolations]
	}
	return p.With("errors", vs)
}

// refuse records what the request did not match and answers it (see
// deny.RespondProblem); in dry run it records what would have been refused
// and returns nil (the caller passes the request on).
func (h *OpenAPI) refuse(w http.ResponseWriter, r *http.Request, st *opStats, v verdict, vs []Violation) error {
	st.note(vs)
	reason := problems[v].reason
	first := vs[0]
	identity.SetOpenAPIViolation(r, &first)
	dry := h.reqDry
	if v == verdictBadResponse {
		dry = h.respDry
	}
	if dry {
		if v == verdictBadResponse {
			st.responseViolations.Add(1)
		} else {
			st.wouldRefuse.Add(1)
		}
		identity.PassDenied(h.logger, r, h.decider, reason,
			zap.String("location", first.Location), zap.String("keyword", first.Keyword))
		return nil
	}
	if v == verdictBadResponse {
		st.responseViolations.Add(1)
	} else {
		st.refused.Add(1)
	}
	identity.SetDenialBy(r, h.decider, reason)
	if ce := h.logger.Check(zapcore.DebugLevel, "request refused"); ce != nil {
		ce.Write(zap.String("reason", reason), zap.String("location", first.Location), zap.String("keyword", first.Keyword))
	}
	switch v {
	case verdictUnauthenticated:
		w.Header().Set("WWW-Authenticate", h.challenge)
	case verdictForbidden:
		w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", error_description="`+deny.QuoteEscape(first.Message)+`"`)
	}
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set("http.openapi.location", first.Location)
		repl.Set("http.openapi.keyword", first.Keyword)
		repl.Set("http.openapi.message", first.Message)
	}
	return deny.RespondProblem(w, r, problem(v, vs), reason)
}

// RequestFieldEdits reports that ServeHTTP changes no request header field
// (fieldedits.Declarer): it reads parameters, Content-Type and cookies,
// puts a body it read back as the same bytes, and writes response fields
// only (TestRequestFieldEdits), so the fast path keeps its plain lane
// behind it.
func (h *OpenAPI) RequestFieldEdits() []string { return nil }

// Interface guards
var (
	_ fieldedits.Declarer         = (*OpenAPI)(nil)
	_ caddy.Provisioner           = (*OpenAPI)(nil)
	_ caddy.Validator             = (*OpenAPI)(nil)
	_ caddy.CleanerUpper          = (*OpenAPI)(nil)
	_ caddyhttp.MiddlewareHandler = (*OpenAPI)(nil)
)
