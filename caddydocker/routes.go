package caddydocker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	_ "github.com/apigate/gateway/caddyh1"        // the module of DefaultTransport
	_ "github.com/apigate/gateway/caddypathguard" // the module of pathGuardHandler
	_ "github.com/apigate/gateway/caddyquota"     // the module of the rate_limit labels' handler
	"github.com/apigate/gateway/internal/planname"
)

// Discovered is one container the engine reported as opted in, with the
// result of parsing its labels: either Service or Errors is set.
type Discovered struct {
	Container Container    `json:"container"`
	Service   *Service     `json:"service,omitempty"`
	Errors    []LabelError `json:"errors,omitempty"`
	// State says whether the container is in its service's upstream pool
	// and, if not, why: one of the State* constants.
	State string `json:"state"`
	// Reason explains a State other than routed, for people.
	Reason string `json:"reason,omitempty"`
}

// The states of a discovered container.
const (
	// StateRouted: in its service's upstream pool.
	StateRouted = "routed"
	// StateInvalid: its labels have errors (Errors); not routed.
	StateInvalid = "invalid"
	// StateStarting: its health check has not passed yet.
	StateStarting = "starting"
	// StateUnhealthy: its health check fails.
	StateUnhealthy = "unhealthy"
	// StateStopping: the engine is stopping it; it left the pool at once
	// and is forgotten when it is gone.
	StateStopping = "stopping"
	// StateLocalOnly: it runs on another host of the fleet and publishes
	// no port for gateway.port, so only its own host's gateway routes it.
	StateLocalOnly = "local_only"
)

// Discover parses the labels of every opted-in container and returns them
// sorted by container name, then ID, each with its State. Containers that
// did not opt in, or lack a label of opts.Scope, are left out.
func Discover(containers []Container, opts LabelOptions) []Discovered {
	out := make([]Discovered, 0, len(containers))
	for _, c := range containers {
		if !Enabled(c.Labels) || !InScope(c.Labels, opts.Scope) {
			continue
		}
		svc, errs := ParseLabels(c, opts)
		d := Discovered{Container: c, Service: svc, Errors: errs, State: StateRouted}
		ignoreHealth := strings.TrimSpace(c.Labels[LabelPrefix+"health"]) == "ignore"
		switch {
		case svc == nil:
			d.State, d.Reason = StateInvalid, "label errors"
		case c.Stopping:
			d.State, d.Reason = StateStopping, "the engine is stopping the container"
		case c.Health == "unhealthy" && !ignoreHealth:
			d.State, d.Reason = StateUnhealthy, "its health check fails (gateway.health=ignore routes it anyway)"
		case c.Health == "starting" && !ignoreHealth:
			d.State, d.Reason = StateStarting, "its health check has not passed yet"
		case svc.Upstream == "":
			d.State = StateLocalOnly
			d.Reason = fmt.Sprintf("runs on host %s and publishes no port for gateway.port: only that host's gateway routes it", c.Node)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Container, out[j].Container
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return a.Node < b.Node
	})
	return out
}

// BuildOptions are the app-wide inputs of route generation.
type BuildOptions struct {
	// Server is the name of the HTTP server the routes go to; it namespaces
	// route IDs and rate limit zones.
	Server string
	// JWTAuth is the jwt_auth handler JSON used by routes that require auth.
	JWTAuth json.RawMessage
	// Permission is the permission handler JSON used by routes with permission=true.
	Permission json.RawMessage
	// RBAC returns the rbac handler JSON requiring any of roles. Nil uses
	// DefaultRBAC.
	RBAC func(roles []string) (json.RawMessage, error)
	// Audit is the audit handler JSON. Nil uses {"handler":"audit"}.
	Audit json.RawMessage
	// Transport is the reverse_proxy transport JSON. Nil uses DefaultTransport.
	Transport json.RawMessage
	// StreamCloseDelay, when positive, is the reverse_proxy
	// stream_close_delay: streams survive a reload for this long.
	StreamCloseDelay time.Duration
	// RateLimitCounts is the counts block of the quota handlers of
	// routes with a rate_limit label (caddyquota.Counts: where they
	// count, and the fleet that shares them). Nil: {}, each gateway
	// counts alone.
	RateLimitCounts json.RawMessage
}

// Retries is how many times a discovered route retries a failed request,
// each time on a replica it has not tried yet.
const Retries = 2

// DefaultStreamCloseDelay is the app's default stream_close_delay.
const DefaultStreamCloseDelay = time.Hour

// DefaultTransport is the upstream transport of discovered routes: the
// gateway's h1 transport (docs/h1.md), whose keepalive pool per upstream
// outlives the config reloads that every container change causes, with a
// short dial timeout so a vanished upstream fails fast.
var DefaultTransport = json.RawMessage(`{"protocol":"h1","dial_timeout":"2s","keepalive":"90s"}`)

// isH1 reports whether a transport's JSON is the h1 transport's.
func isH1(transport json.RawMessage) bool {
	var t struct {
		Protocol string `json:"protocol"`
	}
	return json.Unmarshal(transport, &t) == nil && t.Protocol == "h1"
}

// DefaultRBAC builds {"handler":"rbac","require":[{"any":[...]}]}, the
// rbac handler requiring any of roles. The app builds the handler with the
// rbac module's own Caddyfile parser instead, starting from the docker
// app's rbac block (e.g. its roles_claim).
func DefaultRBAC(roles []string) (json.RawMessage, error) {
	return json.Marshal(map[string]any{
		"handler": "rbac",
		"require": []map[string]any{{"any": roles}},
	})
}

// NoHealthyUpstreamRetryAfter is the Retry-After of the 503
// no_healthy_upstream that a service's routes answer while none of its
// containers may take requests, in seconds: about how long a replica
// takes to start and pass a first health check.
const NoHealthyUpstreamRetryAfter = 5

// NoHealthyUpstreamHandler answers 503 no_healthy_upstream (answer.go).
var NoHealthyUpstreamHandler = mustJSON(problemAnswer(503, "no_healthy_upstream", NoHealthyUpstreamDetail, NoHealthyUpstreamRetryAfter))

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// Plan is the generated route set for a server.
type Plan struct {
	// Routes are the discovered routes, most specific first. Each has an
	// "@id" of RouteIDPrefix(server)+"<service>:<router>".
	Routes []json.RawMessage `json:"routes"`
	// Warnings are conflicts that were resolved (deterministically).
	Warnings []string `json:"warnings,omitempty"`
	// Services is the number of services with at least one route.
	Services int `json:"services"`
	// Upstreams is the number of upstreams over all services.
	Upstreams int `json:"upstreams"`
	// Pools are the replicas (dial addresses) of each routed service. The
	// routes read them per request (Upstreams), so they are not part of
	// Hash: a replica change applies without a config reload.
	Pools map[string][]string `json:"pools,omitempty"`
	// Versions are the replicas of each routed service that runs
	// versions (gateway.version), by version, with the canary labels of
	// each. Like Pools they are read per request (the docker selection
	// policy), not part of Hash: a canary starting, its weight changing
	// or its rollback reload nothing.
	Versions map[string][]VersionGroup `json:"versions,omitempty"`
	// Vanished are the routes whose service is gone that still answer
	// 404 no_route (their routes are the last of Routes); the watcher adds
	// them (trackVanished).
	Vanished []VanishedRoute `json:"vanished,omitempty"`
	// Hash identifies the route set (sha256 of the canonical routes).
	Hash string `json:"hash"`
}

// RouteIDPrefix is the "@id" prefix of every route the app manages on server.
func RouteIDPrefix(server string) string { return "docker:" + server + ":" }

type service struct {
	name       string
	upstreams  []string
	routers    []Router
	containers []string
	versions   map[string]*VersionGroup
	canaryFrom map[string]string // version -> container whose canary labels count
}

// VersionGroup is one version of a service: its routed replicas and, on
// a canary version, its canary labels.
type VersionGroup struct {
	// Version is gateway.version ("" for replicas without the label).
	Version string `json:"version"`
	// Dials are the version's routed replicas, sorted.
	Dials []string `json:"dials"`
	// Canary is the version's canary labels (those of its first
	// container by name), nil on a version without them.
	Canary *CanarySpec `json:"canary,omitempty"`
}

type candidate struct {
	svc    *service
	router Router
}

// BuildRoutes generates the routes for the discovered containers. It is a
// pure function of its inputs: the same containers give the same bytes.
//
// Containers sharing a service name are one load-balanced upstream pool. If
// they disagree about a router, the first container (by name, then ID) wins.
// Two services claiming the same host+path_prefix with the same or
// overlapping method lists (or both without one) conflict: the service whose name sorts first keeps the route. Both cases
// produce a warning. Routes are ordered most specific first: routes with a
// host before those without, longer path prefixes first, routes with a
// method list before those without.
func BuildRoutes(ds []Discovered, opts BuildOptions) (Plan, error) {
	var plan Plan
	services := map[string]*service{}
	var order []string
	// A service's routers come from its routed containers; a service none
	// of whose containers is routed (all unhealthy, starting or stopping)
	// keeps its routes from the others, answering 503.
	routedSvc := map[string]bool{}
	for _, d := range ds {
		if d.State == StateRouted {
			routedSvc[d.Service.Name] = true
		}
	}
	for _, d := range ds {
		if d.Service == nil || d.State == StateLocalOnly || d.State != StateRouted && routedSvc[d.Service.Name] {
			continue
		}
		s := services[d.Service.Name]
		if s == nil {
			s = &service{name: d.Service.Name}
			services[s.name] = s
			order = append(order, s.name)
		}
		if d.State == StateRouted {
			s.upstreams = append(s.upstreams, d.Service.Upstream)
			s.addVersion(d, &plan)
		}
		s.containers = append(s.containers, d.Container.Name)
		for _, r := range d.Service.Routers {
			i := sort.Search(len(s.routers), func(i int) bool { return s.routers[i].Name >= r.Name })
			if i < len(s.routers) && s.routers[i].Name == r.Name {
				if !reflect.DeepEqual(s.routers[i], r) {
					plan.Warnings = append(plan.Warnings, fmt.Sprintf(
						"service %s: container %s defines router %s differently from container %s; using %s's",
						s.name, d.Container.Name, r.Name, s.containers[0], s.containers[0]))
				}
				continue
			}
			s.routers = append(s.routers, Router{})
			copy(s.routers[i+1:], s.routers[i:])
			s.routers[i] = r
		}
	}
	sort.Strings(order)

	var cands []candidate
	for _, name := range order {
		s := services[name]
		s.upstreams = sortedUnique(s.upstreams)
		for _, r := range s.routers {
			cands = append(cands, candidate{svc: s, router: r})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return lessRoute(cands[i], cands[j]) })

	// Resolve conflicts: the first claimant (by service name) keeps the route.
	kept := cands[:0]
	type claim struct {
		svc, router string
		methods     []string
	}
	claims := map[string][]claim{}
	for _, c := range cands {
		key := strings.Join(c.router.Hosts, ",") + " " + c.router.PathPrefix
		conflict := ""
		for _, other := range claims[key] {
			if other.svc != c.svc.name && methodsOverlap(other.methods, c.router.Methods) {
				conflict = other.svc + "/" + other.router
				break
			}
		}
		if conflict != "" {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf(
				"route conflict on host=%q path_prefix=%q: service %s router %s is ignored; %s keeps the route",
				strings.Join(c.router.Hosts, ","), c.router.PathPrefix, c.svc.name, c.router.Name, conflict))
			continue
		}
		claims[key] = append(claims[key], claim{svc: c.svc.name, router: c.router.Name, methods: c.router.Methods})
		kept = append(kept, c)
	}
	sort.Strings(plan.Warnings)

	used := map[string]bool{}
	for _, c := range kept {
		rt, err := buildRoute(c.svc, c.router, opts)
		if err != nil {
			// One router that cannot be built never takes the others down.
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("service %s router %s skipped: %v", c.svc.name, c.router.Name, err))
			continue
		}
		plan.Routes = append(plan.Routes, rt)
		if !used[c.svc.name] && len(c.svc.upstreams) > 0 {
			used[c.svc.name] = true
			plan.Services++
			plan.Upstreams += len(c.svc.upstreams)
			if plan.Pools == nil {
				plan.Pools = map[string][]string{}
			}
			plan.Pools[c.svc.name] = c.svc.upstreams
			if vs := c.svc.versionGroups(); vs != nil {
				if plan.Versions == nil {
					plan.Versions = map[string][]VersionGroup{}
				}
				plan.Versions[c.svc.name] = vs
			}
		}
	}
	sort.Strings(plan.Warnings)
	plan.Hash = HashRoutes(plan.Routes)
	return plan, nil
}

// addVersion adds a routed container to its version's group. The first
// container of a version (by name) gives the version's canary labels; one
// that disagrees is warned about.
func (s *service) addVersion(d Discovered, plan *Plan) {
	v := d.Service.Version
	if s.versions == nil {
		s.versions = map[string]*VersionGroup{}
		s.canaryFrom = map[string]string{}
	}
	g := s.versions[v]
	if g == nil {
		g = &VersionGroup{Version: v, Canary: d.Service.Canary}
		s.versions[v] = g
		s.canaryFrom[v] = d.Container.Name
	} else if !reflect.DeepEqual(g.Canary, d.Service.Canary) {
		plan.Warnings = append(plan.Warnings, fmt.Sprintf(
			"service %s version %s: container %s has other gateway.canary.* labels than container %s; using %s's",
			s.name, v, d.Container.Name, s.canaryFrom[v], s.canaryFrom[v]))
	}
	g.Dials = append(g.Dials, d.Service.Upstream)
}

// versionGroups returns the service's versions sorted by version, or nil
// when no replica has a version label.
func (s *service) versionGroups() []VersionGroup {
	if len(s.versions) == 0 {
		return nil
	}
	if _, only := s.versions[""]; only && len(s.versions) == 1 {
		return nil
	}
	out := make([]VersionGroup, 0, len(s.versions))
	for _, g := range s.versions {
		vg := *g
		vg.Dials = sortedUnique(g.Dials)
		out = append(out, vg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

func lessRoute(a, b candidate) bool {
	ah, bh := len(a.router.Hosts) > 0, len(b.router.Hosts) > 0
	if ah != bh {
		return ah
	}
	if len(a.router.PathPrefix) != len(b.router.PathPrefix) {
		return len(a.router.PathPrefix) > len(b.router.PathPrefix)
	}
	if a.router.PathPrefix != b.router.PathPrefix {
		return a.router.PathPrefix < b.router.PathPrefix
	}
	am, bm := len(a.router.Methods) > 0, len(b.router.Methods) > 0
	if am != bm {
		return am
	}
	if a.svc.name != b.svc.name {
		return a.svc.name < b.svc.name
	}
	return a.router.Name < b.router.Name
}

// methodsOverlap reports whether two routers on one host+prefix fight for
// the same requests: both match every method, or their method lists share
// one. A router with a method list and one without do not conflict: the
// former is ordered first and the latter takes the remaining methods.
func methodsOverlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

type matchJSON struct {
	Host   []string `json:"host,omitempty"`
	Method []string `json:"method,omitempty"`
	Path   []string `json:"path,omitempty"`
}

type routeJSON struct {
	ID       string            `json:"@id"`
	Match    []matchJSON       `json:"match,omitempty"`
	Handle   []json.RawMessage `json:"handle"`
	Terminal bool              `json:"terminal"`
}

// RatePlan is the plan of a router's rate_limit label: the name it is
// counted under (per client) and that its 429 answers and RateLimit
// fields carry, unique per server, service and router:
// docker_<server>_<service>_<router>, each character a plan name cannot
// have written as '_', and a longer one cut to 64 characters ending with
// a hash of the whole.
func RatePlan(server, svc, router string) string {
	name := "docker_" + server + "_" + svc + "_" + router
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > planname.MaxLen {
		sum := sha256.Sum256([]byte(name))
		b = append(b[:planname.MaxLen-17], '_')
		b = append(b, hex.EncodeToString(sum[:8])...)
	}
	return string(b)
}

func buildRoute(s *service, r Router, opts BuildOptions) (json.RawMessage, error) {
	rt := routeJSON{ID: RouteIDPrefix(opts.Server) + s.name + ":" + r.Name, Terminal: true}
	m := matchJSON{Host: r.Hosts, Method: r.Methods}
	if r.PathPrefix != "/" {
		m.Path = []string{r.PathPrefix, r.PathPrefix + "/*"}
	}
	if m.Host != nil || m.Method != nil || m.Path != nil {
		rt.Match = []matchJSON{m}
	}
	add := func(raw json.RawMessage) { rt.Handle = append(rt.Handle, raw) }

	if r.Audit {
		if opts.Audit != nil {
			add(opts.Audit)
		} else {
			add(json.RawMessage(`{"handler":"audit"}`))
		}
	}
	if h := pathGuardHandler(r); h != nil {
		add(h)
	}
	if r.AuthRequired {
		if len(opts.JWTAuth) == 0 {
			return nil, fmt.Errorf("auth required but no jwt_auth handler configured")
		}
		add(opts.JWTAuth)
	}
	if len(r.Roles) > 0 {
		f := opts.RBAC
		if f == nil {
			f = DefaultRBAC
		}
		raw, err := f(r.Roles)
		if err != nil {
			return nil, fmt.Errorf("building rbac handler: %w", err)
		}
		add(raw)
	}
	if r.RateLimit != nil {
		key := "{http.vars.client_ip}"
		if r.AuthRequired {
			key = "{http.auth.user.id}"
		}
		// the quota handler with a plan of its own, counted per client
		// in the label limits' own store (and fleet): one counting
		// engine with the quota's leases
		counts := opts.RateLimitCounts
		if counts == nil {
			counts = json.RawMessage(`{}`)
		}
		h := map[string]any{
			"handler": "quota",
			"key":     key,
			"plan":    RatePlan(opts.Server, s.name, r.Name),
			"limits":  []string{r.RateLimit.Limit()},
			"counts":  counts,
		}
		raw, err := json.Marshal(h)
		if err != nil {
			return nil, err
		}
		add(raw)
	}
	if r.Permission {
		if len(opts.Permission) == 0 {
			return nil, fmt.Errorf("permission=true but no permission handler configured")
		}
		add(opts.Permission)
	}
	if len(s.upstreams) == 0 {
		// No replica may take requests: say so, and when to come back,
		// after the route's duties have had their say.
		add(NoHealthyUpstreamHandler)
		return json.Marshal(rt)
	}
	if r.StripPrefix && r.PathPrefix != "/" {
		raw, _ := json.Marshal(map[string]string{"handler": "rewrite", "strip_path_prefix": r.PathPrefix})
		add(raw)
	}
	transport := opts.Transport
	if transport == nil {
		transport = DefaultTransport
	}
	// A failed request is retried on another replica (the source leaves
	// out the ones it failed on).
	lb := map[string]any{
		// round robin over the replicas, and the split between a
		// service's versions when it runs a canary (policy.go)
		"selection_policy": map[string]string{"policy": "docker", "server": opts.Server, "service": s.name},
		"retries":          Retries,
	}
	if isH1(transport) {
		// The h1 transport decides what may be retried elsewhere
		// (caddyh1.RetryOnAnother: a dial error for any method; a GET,
		// HEAD or OPTIONS whose replica closed or reset the connection
		// before answering, once) and marks it for Caddy. A retry_match
		// that matches no request keeps Caddy from adding its own
		// default on top (any other error of a GET).
		lb["retry_match"] = []map[string]any{{"method": []string{}}}
	}
	rp := map[string]any{
		"handler":   "reverse_proxy",
		"transport": transport,
		// the service's replicas, read per request (upstreams.go)
		"dynamic_upstreams": map[string]string{"source": "docker", "server": opts.Server, "service": s.name},
		"load_balancing":    lb,
	}
	if opts.StreamCloseDelay > 0 {
		rp["stream_close_delay"] = opts.StreamCloseDelay.String()
	}
	raw, err := json.Marshal(rp)
	if err != nil {
		return nil, err
	}
	add(raw)
	return json.Marshal(rt)
}

// pathGuardHandler is a router's path_guard handler, nil when it is off:
// first after audit (whose event records its refusals), before every duty
// and before strip_prefix, so the path they see and the one forwarded are
// the path it judged.
func pathGuardHandler(r Router) json.RawMessage {
	if r.PathGuard == PathGuardOff {
		return nil
	}
	h := map[string]any{"handler": "path_guard"}
	if r.PathGuard == PathGuardNormalize {
		h["mode"] = PathGuardNormalize
	}
	if r.PathGuardKeepSlash {
		h["keep_encoded_slash"] = true
	}
	raw, _ := json.Marshal(h)
	return raw
}

// Canonical re-encodes JSON the way Caddy's admin API returns it (object
// keys sorted, numbers normalized), so that generated and live routes can be
// compared byte for byte.
func Canonical(raw json.RawMessage) (json.RawMessage, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// HashRoutes returns a hex sha256 over the canonical form of routes.
func HashRoutes(routes []json.RawMessage) string {
	h := sha256.New()
	for _, r := range routes {
		c, err := Canonical(r)
		if err != nil {
			c = r
		}
		h.Write(c)
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RouteID returns the "@id" of a route, or "".
func RouteID(raw json.RawMessage) string {
	var v struct {
		ID any `json:"@id"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	s, _ := v.ID.(string)
	return s
}

// RoutesHandlerRoute is the route that holds the docker_routes handler
// where a server's routes have none: in front of the server's own routes
// (the default placement of discovered routes). It lets requests through
// while discovery starts, to the server's own routes, and the catch-all
// answers 503 for what they leave.
var RoutesHandlerRoute = json.RawMessage(`{"handle":[{"handler":"docker_routes","pass_while_starting":true}]}`)

// CatchAllRoute is the server's last route: the catch-all docker_routes
// handler (404 no_route, or 503 discovery_starting before any route set).
var CatchAllRoute = json.RawMessage(`{"handle":[{"catch_all":true,"handler":"docker_routes"}]}`)

// EnsureHandlers returns a server's route list with what discovery needs:
// a docker_routes handler somewhere in it (where the routes have none, a
// route holding one goes in front of the server's own routes), and the
// catch-all as the last route, with the "terminal" flag of the server's
// last own route dropped (see withoutTerminal). Routes that an earlier
// version of the app put in the server (their "@id" starts with
// RouteIDPrefix(server)) are dropped. Routes that have all this come back
// unchanged, so applying is idempotent.
func EnsureHandlers(server string, current []json.RawMessage) []json.RawMessage {
	prefix := RouteIDPrefix(server)
	own := make([]json.RawMessage, 0, len(current))
	for _, r := range current {
		if strings.HasPrefix(RouteID(r), prefix) || isCatchAll(r) {
			continue
		}
		own = append(own, r)
	}
	out := make([]json.RawMessage, 0, len(own)+2)
	if !HasRoutesHandler(own) {
		out = append(out, RoutesHandlerRoute)
	}
	out = append(out, own...)
	if len(own) > 0 {
		out[len(out)-1] = withoutTerminal(out[len(out)-1])
	}
	return append(out, CatchAllRoute)
}

// handlerJSON is what route walks read of a handler.
type handlerJSON struct {
	Handler  string            `json:"handler"`
	CatchAll bool              `json:"catch_all"`
	Routes   []json.RawMessage `json:"routes"`
}

// routeHandlers returns the handlers of a route's JSON.
func routeHandlers(raw json.RawMessage) []handlerJSON {
	var rt struct {
		Handle []json.RawMessage `json:"handle"`
	}
	if json.Unmarshal(raw, &rt) != nil {
		return nil
	}
	out := make([]handlerJSON, 0, len(rt.Handle))
	for _, h := range rt.Handle {
		var hj handlerJSON
		if json.Unmarshal(h, &hj) == nil {
			out = append(out, hj)
		}
	}
	return out
}

// isCatchAll reports whether a route is the catch-all route: its one
// handler is the catch-all docker_routes handler.
func isCatchAll(raw json.RawMessage) bool {
	hs := routeHandlers(raw)
	return len(hs) == 1 && hs[0].Handler == "docker_routes" && hs[0].CatchAll
}

// HasRoutesHandler reports whether routes hold a docker_routes handler
// (not the catch-all), at any depth of subroutes.
func HasRoutesHandler(routes []json.RawMessage) bool {
	for _, r := range routes {
		for _, h := range routeHandlers(r) {
			switch {
			case h.Handler == "docker_routes" && !h.CatchAll:
				return true
			case h.Handler == "subroute" && HasRoutesHandler(h.Routes):
				return true
			}
		}
	}
	return false
}

// withoutTerminal drops "terminal" from the server's last own route. A
// Caddyfile site block becomes one terminal route; a request that it leaves
// unhandled would get Caddy's empty 200. Without the flag, such a request
// reaches the catch-all instead; a request the site handles never reaches
// it, since handlers that respond do not call the next one.
func withoutTerminal(raw json.RawMessage) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil || obj == nil {
		return raw
	}
	if _, ok := obj["terminal"]; !ok {
		return raw
	}
	delete(obj, "terminal")
	b, err := json.Marshal(obj)
	if err != nil {
		return raw
	}
	return b
}

// SameRoutes reports whether two route lists are equal in canonical form.
func SameRoutes(a, b []json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		ca, err1 := Canonical(a[i])
		cb, err2 := Canonical(b[i])
		if err1 != nil || err2 != nil || !bytes.Equal(ca, cb) {
			return false
		}
	}
	return true
}

// VanishedRoute is a discovered route whose service is gone: for the
// app's forget_after, its matcher answers 404 {"error":"no_route"} in the
// docker_routes handlers, after the live routes, so that a request for a
// service that disappeared gets the no_route answer whatever the site's
// own routes after the handler would do (a catch-all `handle` included).
type VanishedRoute struct {
	// ID is the route's "@id" when it was live.
	ID string `json:"id"`
	// Match is its matcher sets, as in the live route.
	Match json.RawMessage `json:"match"`
	// Since is when it left the route set.
	Since time.Time `json:"since"`
}

// DefaultForgetAfter is how long a vanished route answers no_route.
const DefaultForgetAfter = 24 * time.Hour

// vanishedIDPrefix starts the "@id" of a vanished route's 404 route.
func vanishedIDPrefix(server string) string { return RouteIDPrefix(server) + "vanished:" }

// routeMatch returns a route's "@id" and its matcher sets ("" when it has
// none: a route of every request, which never becomes a vanished route,
// since it would answer for the whole site).
func routeMatch(raw json.RawMessage) (id string, match json.RawMessage, key string) {
	var rt struct {
		ID    string          `json:"@id"`
		Match json.RawMessage `json:"match"`
	}
	if json.Unmarshal(raw, &rt) != nil || len(rt.Match) == 0 || string(rt.Match) == "null" || string(rt.Match) == "[]" {
		return rt.ID, nil, ""
	}
	c, err := Canonical(rt.Match)
	if err != nil {
		return rt.ID, nil, ""
	}
	return rt.ID, rt.Match, string(c)
}

// trackVanished updates vanished (keyed by canonical matcher) with the
// routes of before that plan no longer has (gone since now), drops those
// plan has again and those older than keep, and appends a 404 no_route
// route for each remaining one to plan (rehashed). keep <= 0 keeps none.
func trackVanished(server string, vanished map[string]VanishedRoute, before, plan *Plan, keep time.Duration, now time.Time) {
	if keep <= 0 {
		clear(vanished)
		return
	}
	live := map[string]bool{}
	for _, r := range plan.Routes {
		if _, _, k := routeMatch(r); k != "" {
			live[k] = true
		}
	}
	if before != nil {
		for _, r := range before.Routes {
			id, m, k := routeMatch(r)
			if k == "" || live[k] || strings.HasPrefix(id, vanishedIDPrefix(server)) {
				continue
			}
			if _, ok := vanished[k]; !ok {
				vanished[k] = VanishedRoute{ID: id, Match: m, Since: now}
			}
		}
	}
	keys := make([]string, 0, len(vanished))
	for k, v := range vanished {
		if live[k] || now.Sub(v.Since) >= keep {
			delete(vanished, k)
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return
	}
	// most specific first, as live routes are: longer matchers first
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) > len(keys[j])
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		v := vanished[k]
		plan.Routes = append(plan.Routes, vanishedRoute(server, v))
	}
	plan.Vanished = make([]VanishedRoute, 0, len(keys))
	for _, k := range keys {
		plan.Vanished = append(plan.Vanished, vanished[k])
	}
	plan.Hash = HashRoutes(plan.Routes)
}

// vanishedRoute is the 404 no_route route of a vanished route.
func vanishedRoute(server string, v VanishedRoute) json.RawMessage {
	id := strings.TrimPrefix(v.ID, RouteIDPrefix(server))
	return mustJSON(map[string]any{
		"@id":      vanishedIDPrefix(server) + id,
		"match":    v.Match,
		"handle":   []map[string]any{problemAnswer(404, "no_route", NoRouteDetail, 0)},
		"terminal": true,
	})
}
