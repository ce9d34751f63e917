package caddydocker

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LabelPrefix starts every label the docker app reads.
const LabelPrefix = "gateway."

// Container is what the engine reports about one running container, reduced
// to what routing needs. It is also the unit stored in the state file.
type Container struct {
	// ID is the engine's container ID.
	ID string `json:"id"`
	// Name is the container name, without the leading slash.
	Name string `json:"name"`
	// Labels are the container's labels (all of them; only gateway.* are read).
	Labels map[string]string `json:"labels"`
	// IP is the container's first network address, if it has one.
	IP string `json:"ip,omitempty"`
	// HostNetwork is true for containers sharing the host's network
	// namespace; their default upstream address is 127.0.0.1.
	HostNetwork bool `json:"host_network,omitempty"`
	// Health is "healthy", "unhealthy", "starting" or "" (no health check).
	Health string `json:"health,omitempty"`
	// Ports are the container's published TCP ports: how its host
	// reaches a container port from outside.
	Ports []Port `json:"ports,omitempty"`
	// Node is the fleet node (host) the container runs on, set on
	// containers that another gateway of the fleet announced; "" is this
	// gateway's own host.
	Node string `json:"node,omitempty"`
	// Advertise is the address at which other hosts reach Node's
	// published ports (the announcing gateway's fleet advertise).
	Advertise string `json:"advertise,omitempty"`
	// Stopping is set from the moment the engine reports that the
	// container is being stopped (a kill or stop event) until it is gone:
	// it leaves its service's pool at once, before its process exits.
	Stopping bool `json:"stopping,omitempty"`
}

// Port is one published TCP port: the container's Private port is reached
// at the host's Public port.
type Port struct {
	Private int `json:"private"`
	Public  int `json:"public"`
}

// PublishedPort returns the host port at which the container's port is
// reached from other hosts: the port itself for a container on the host
// network, else its published mapping; 0 when it is not published.
func (c Container) PublishedPort(port int) int {
	if c.HostNetwork {
		return port
	}
	for _, p := range c.Ports {
		if p.Private == port && p.Public > 0 {
			return p.Public
		}
	}
	return 0
}

// Service is the routing configuration that one container's labels describe.
type Service struct {
	// Name is gateway.name (default: the container name).
	Name string `json:"name"`
	// Upstream is the dial address, host:port.
	Upstream string `json:"upstream"`
	// Routers are the container's routers, sorted by name.
	Routers []Router `json:"routers"`
	// Version is gateway.version: which version of the service the
	// container runs ("" without the label).
	Version string `json:"version,omitempty"`
	// Canary is set on the containers of a canary version (the
	// gateway.canary.* labels).
	Canary *CanarySpec `json:"canary,omitempty"`
}

// Router is one gateway.router.<name>.* group of labels.
type Router struct {
	Name         string   `json:"name"`
	PathPrefix   string   `json:"path_prefix"`
	Hosts        []string `json:"hosts,omitempty"`
	Methods      []string `json:"methods,omitempty"`
	StripPrefix  bool     `json:"strip_prefix,omitempty"`
	AuthRequired bool     `json:"auth_required"`
	Roles        []string `json:"roles,omitempty"`
	RateLimit    *Rate    `json:"rate_limit,omitempty"`
	Permission   bool     `json:"permission,omitempty"`
	Audit        bool     `json:"audit"`
	// PathGuard is the router's path_guard mode: reject (the default),
	// normalize, or off.
	PathGuard string `json:"path_guard"`
	// PathGuardKeepSlash is path_guard's keep_encoded_slash.
	PathGuardKeepSlash bool `json:"path_guard_keep_encoded_slash,omitempty"`
}

// The values of a router's path_guard label.
const (
	PathGuardReject    = "reject"
	PathGuardNormalize = "normalize"
	PathGuardOff       = "off"
)

// Rate is a parsed rate_limit label: Events per Window.
type Rate struct {
	Events int           `json:"events"`
	Window time.Duration `json:"window"`
}

// String formats the rate as in its label, e.g. "100/1m0s".
func (r Rate) String() string { return fmt.Sprintf("%d/%s", r.Events, r.Window) }

// Limit is the rate as a quota limit: "100/1m0s" (a sliding window of
// its length).
func (r Rate) Limit() string { return r.String() }

// LabelError says which label of a container is wrong and why.
type LabelError struct {
	// Label is the full label key (e.g. "gateway.port").
	Label string `json:"label"`
	// Value is the label's value as written (it is config, never a secret).
	Value string `json:"value,omitempty"`
	// Reason says what is wrong.
	Reason string `json:"reason"`
}

func (e LabelError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("label %s: %s", e.Label, e.Reason)
	}
	return fmt.Sprintf("label %s=%q: %s", e.Label, e.Value, e.Reason)
}

// LabelOptions are the parts of the app's configuration that decide whether
// labels are satisfiable: a route that requires auth needs a jwt_auth block.
type LabelOptions struct {
	// HaveJWT is true when the docker app has a jwt_auth block.
	HaveJWT bool
	// HavePermission is true when the docker app has a permission block.
	HavePermission bool
	// Scope are the labels a container must carry for this gateway to
	// route it (the app's scope option; all of them): none, every opted-in
	// container.
	Scope []ScopeLabel
}

// ScopeLabel is one label of the app's scope: Key=Value, or with Any set
// the key with any value.
type ScopeLabel struct {
	Key, Value string
	Any        bool
}

// ParseScope parses a scope entry: "<label>=<value>", or "<label>" for the
// label with any value.
func ParseScope(s string) (ScopeLabel, error) {
	k, v, hasValue := strings.Cut(s, "=")
	k = strings.TrimSpace(k)
	if k == "" || strings.ContainsAny(k, " \t") {
		return ScopeLabel{}, fmt.Errorf("invalid scope %q: want <label>=<value> or <label>", s)
	}
	if !hasValue {
		return ScopeLabel{Key: k, Any: true}, nil
	}
	return ScopeLabel{Key: k, Value: v}, nil
}

func (l ScopeLabel) String() string {
	if l.Any {
		return l.Key
	}
	return l.Key + "=" + l.Value
}

// InScope reports whether labels carry every scope label.
func InScope(labels map[string]string, scope []ScopeLabel) bool {
	for _, l := range scope {
		v, ok := labels[l.Key]
		if !ok || !l.Any && v != l.Value {
			return false
		}
	}
	return true
}

// Enabled reports whether labels opt in with gateway.enable=true. A value
// that is not a boolean counts as opting in, so that ParseLabels reports it.
func Enabled(labels map[string]string) bool {
	v, ok := labels[LabelPrefix+"enable"]
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return err != nil || b
}

// router label keys (after gateway.router.<name>.)
var routerKeys = map[string]bool{
	"path_prefix":                   true,
	"host":                          true,
	"methods":                       true,
	"strip_prefix":                  true,
	"auth.required":                 true,
	"auth.roles":                    true,
	"rate_limit":                    true,
	"permission":                    true,
	"audit":                         true,
	"path_guard":                    true,
	"path_guard.keep_encoded_slash": true,
}

// ParseLabels turns a container's labels into a Service. Any error makes the
// whole container unroutable (the caller skips it); errors are sorted by
// label so that logs and golden files are stable. It never panics on any
// input.
func ParseLabels(c Container, opts LabelOptions) (*Service, []LabelError) {
	p := labelParser{c: c, opts: opts}
	svc := p.service()
	routers := p.routerLabels()
	names := make([]string, 0, len(routers))
	for n := range routers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, rname := range names {
		svc.Routers = append(svc.Routers, p.router(rname, routers[rname]))
	}
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Label < p.errs[j].Label })
		return nil, p.errs
	}
	return svc, nil
}

// labelParser collects the label errors of one container.
type labelParser struct {
	c    Container
	opts LabelOptions
	errs []LabelError
}

// scoped reports whether key is one of the app's scope labels.
func (p *labelParser) scoped(key string) bool {
	for _, l := range p.opts.Scope {
		if l.Key == key {
			return true
		}
	}
	return false
}

func (p *labelParser) bad(label, value, format string, args ...any) {
	p.errs = append(p.errs, LabelError{Label: label, Value: value, Reason: fmt.Sprintf(format, args...)})
}

func (p *labelParser) get(key string) (string, bool) {
	v, ok := p.c.Labels[LabelPrefix+key]
	return strings.TrimSpace(v), ok
}

// service reads the container-wide labels: enable, name, port, address.
func (p *labelParser) service() *Service {
	if v, ok := p.get("enable"); !ok {
		p.bad(LabelPrefix+"enable", "", "missing: set gateway.enable=true to opt in")
	} else if b, err := strconv.ParseBool(v); err != nil {
		p.bad(LabelPrefix+"enable", v, "not a boolean")
	} else if !b {
		p.bad(LabelPrefix+"enable", v, "container did not opt in")
	}

	svc := &Service{}
	name, ok := p.get("name")
	if !ok || name == "" {
		name = strings.TrimPrefix(p.c.Name, "/")
		if !ok && !validName(name) {
			p.bad(LabelPrefix+"name", "", "container name %q is not a valid service name; set gateway.name", name)
		}
	}
	if ok && !validName(name) {
		p.bad(LabelPrefix+"name", name, "must be 1-128 characters of letters, digits, '.', '_' or '-'")
	}
	svc.Name = name

	port := 0
	if v, ok := p.get("port"); !ok {
		p.bad(LabelPrefix+"port", "", "missing: the upstream port is required")
	} else if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 65535 {
		p.bad(LabelPrefix+"port", v, "must be a port number 1-65535")
	} else {
		port = n
	}

	addr := p.c.IP
	if p.c.HostNetwork {
		addr = "127.0.0.1"
	}
	if v, ok := p.get("address"); ok {
		if !validHost(v) {
			p.bad(LabelPrefix+"address", v, "must be a host name or IP address")
		} else {
			addr = strings.Trim(v, "[]")
		}
	} else if addr == "" {
		p.bad(LabelPrefix+"address", "", "container has no IP address; set gateway.address")
	}
	if v, ok := p.get("health"); ok && v != "ignore" {
		p.bad(LabelPrefix+"health", v, "the only value is ignore (route the container whatever its health check says)")
	}
	p.versionLabels(svc)
	if p.c.Node != "" && port > 0 {
		// Announced by another host of the fleet: reached at that host's
		// advertise address and the port published for gateway.port,
		// unless gateway.address names an address other hosts can reach.
		if v, ok := p.get("address"); ok && validHost(v) && !isLoopback(v) {
			addr = strings.Trim(v, "[]")
		} else if pub := p.c.PublishedPort(port); pub > 0 && p.c.Advertise != "" {
			addr, port = p.c.Advertise, pub
		} else {
			addr = "" // routed on its own host only (see Discover)
		}
	}
	if port > 0 && addr != "" {
		svc.Upstream = net.JoinHostPort(addr, strconv.Itoa(port))
	}
	return svc
}

// isLoopback reports whether host is a loopback address or localhost.
func isLoopback(host string) bool {
	host = strings.Trim(host, "[]")
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

// routerLabels groups the router labels by router name; any other
// gateway.* label that is not a container-wide one is an error.
func (p *labelParser) routerLabels() map[string]map[string]string {
	routers := map[string]map[string]string{}
	for key, value := range p.c.Labels {
		if !strings.HasPrefix(key, LabelPrefix) {
			continue
		}
		rest := key[len(LabelPrefix):]
		switch rest {
		case "enable", "name", "port", "address", "health", "version":
			continue
		}
		if strings.HasPrefix(rest, "canary.") {
			continue // versionLabels
		}
		if p.scoped(key) {
			continue // the app's scope label, which may be a gateway.* one
		}
		if !strings.HasPrefix(rest, "router.") {
			p.bad(key, value, "unknown label")
			continue
		}
		rest = rest[len("router."):]
		rname, sub, found := strings.Cut(rest, ".")
		if !found || !validName(rname) || strings.Contains(rname, ".") {
			p.bad(key, value, "unknown label: expected gateway.router.<name>.<key> with a name of letters, digits, '_' or '-'")
			continue
		}
		if !routerKeys[sub] {
			p.bad(key, value, "unknown router key %q", sub)
			continue
		}
		if routers[rname] == nil {
			routers[rname] = map[string]string{}
		}
		routers[rname][sub] = strings.TrimSpace(value)
	}
	if len(routers) == 0 {
		p.bad(LabelPrefix+"router.<name>.path_prefix", "", "no router: at least one gateway.router.<name>.path_prefix is required")
	}
	return routers
}

// router reads one router's labels.
func (p *labelParser) router(rname string, kv map[string]string) Router {
	label := func(sub string) string { return LabelPrefix + "router." + rname + "." + sub }
	r := Router{Name: rname, AuthRequired: true, Audit: true, PathGuard: PathGuardReject}

	if v, ok := kv["path_prefix"]; !ok {
		p.bad(label("path_prefix"), "", "missing: every router needs a path_prefix")
	} else if prefix, err := parsePathPrefix(v); err != nil {
		p.bad(label("path_prefix"), v, "%v", err)
	} else {
		r.PathPrefix = prefix
	}
	// list reads a comma-separated label through norm and valid.
	list := func(sub, what, noun string, norm func(string) string, valid func(string) bool) []string {
		v, ok := kv[sub]
		if !ok {
			return nil
		}
		var out []string
		for _, x := range splitList(v) {
			x = norm(x)
			if !valid(x) {
				p.bad(label(sub), v, "%q is not %s", x, what)
				continue
			}
			out = append(out, x)
		}
		if len(splitList(v)) == 0 {
			p.bad(label(sub), v, "empty %s list", noun)
		}
		return sortedUnique(out)
	}
	r.Hosts = list("host", "a host name", "host", strings.ToLower, func(h string) bool { return validHost(h) && !strings.Contains(h, ":") })
	r.Methods = list("methods", "an HTTP method", "method", strings.ToUpper, validMethod)
	boolean := func(sub string, dst *bool) {
		if v, ok := kv[sub]; ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				p.bad(label(sub), v, "not a boolean (true or false)")
				return
			}
			*dst = b
		}
	}
	boolean("strip_prefix", &r.StripPrefix)
	boolean("auth.required", &r.AuthRequired)
	boolean("permission", &r.Permission)
	boolean("audit", &r.Audit)
	if v, ok := kv["path_guard"]; ok {
		switch v {
		case PathGuardReject, PathGuardNormalize, PathGuardOff:
			r.PathGuard = v
		default:
			p.bad(label("path_guard"), v, "must be reject, normalize or off")
		}
	}
	boolean("path_guard.keep_encoded_slash", &r.PathGuardKeepSlash)
	if r.PathGuardKeepSlash && r.PathGuard == PathGuardOff {
		p.bad(label("path_guard.keep_encoded_slash"), kv["path_guard.keep_encoded_slash"], "path_guard is off")
	}
	if v, ok := kv["auth.roles"]; ok {
		roles := splitList(v)
		for _, role := range roles {
			if !validRole(role) {
				p.bad(label("auth.roles"), v, "%q is not a valid role name", role)
			}
		}
		if len(roles) == 0 {
			p.bad(label("auth.roles"), v, "empty role list")
		}
		if len(roles) > 64 {
			p.bad(label("auth.roles"), v, "more than 64 roles")
		}
		r.Roles = sortedUnique(roles)
		if !r.AuthRequired {
			p.bad(label("auth.roles"), v, "roles need auth.required=true")
		}
	}
	if v, ok := kv["rate_limit"]; ok {
		rate, err := ParseRate(v)
		if err != nil {
			p.bad(label("rate_limit"), v, "%v", err)
		} else {
			r.RateLimit = &rate
		}
	}
	if r.AuthRequired && !p.opts.HaveJWT {
		p.bad(label("auth.required"), kv["auth.required"], "auth is required (the default) but the docker app has no jwt_auth block; configure one or set auth.required=false")
	}
	if r.Permission && !p.opts.HavePermission {
		p.bad(label("permission"), kv["permission"], "the docker app has no permission block")
	}
	return r
}

// ParseRate parses a rate_limit label, "<events>/<window>": "100/1m",
// "10/1s", "5/30s", "1000/h". The window is a Go duration or a bare unit
// (s, m, h), from 1s to 168h (a sliding window, counted in 60 steps);
// events must be positive.
func ParseRate(s string) (Rate, error) {
	n, w, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Rate{}, fmt.Errorf("must be <events>/<window>, e.g. 100/1m")
	}
	events, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil || events < 1 || events > 1_000_000_000 {
		return Rate{}, fmt.Errorf("events %q must be a positive integer", n)
	}
	w = strings.TrimSpace(w)
	switch w {
	case "s", "m", "h":
		w = "1" + w
	}
	window, err := time.ParseDuration(w)
	if err != nil || window < time.Second || window > 7*24*time.Hour {
		return Rate{}, fmt.Errorf("window %q must be a duration between 1s and 168h, e.g. 1m", w)
	}
	return Rate{Events: events, Window: window}, nil
}

func parsePathPrefix(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("must start with '/'")
	}
	if len(p) > 1024 {
		return "", fmt.Errorf("too long")
	}
	for _, r := range p {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("*?#{}\\\"'%", r) {
			return "", fmt.Errorf("must not contain %q", r)
		}
	}
	if strings.Contains(p, "//") || strings.Contains(p, "/./") || strings.Contains(p, "/../") ||
		strings.HasSuffix(p, "/..") || strings.HasSuffix(p, "/.") {
		return "", fmt.Errorf("must be a clean path")
	}
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	return p, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

func sortedUnique(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := append([]string(nil), in...)
	sort.Strings(out)
	j := 0
	for i := range out {
		if i == 0 || out[i] != out[j-1] {
			out[j] = out[i]
			j++
		}
	}
	return out[:j]
}

func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func validHost(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil {
		return true
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' ||
			(r == '*' && i == 0 && strings.HasPrefix(s, "*."))
		if !ok {
			return false
		}
	}
	return true
}

func validMethod(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

func validRole(s string) bool {
	if len(s) > 256 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || strings.ContainsRune("{}\"'`\\;#", r) {
			return false
		}
	}
	return true
}
