package main

import "fmt"

// Scenario is one configuration under load.
type Scenario struct {
	Name   string // id, used in tables and the chart
	Label  string // what it is, in words
	Group  string // bare | auth | duties | steps | tls
	Server string // direct | nginx | haproxy | caddy | gateway | traefik | fastproxy
	Conf   Conf   // template data (Port and addresses are filled in at run time)
	Token  string // "" | HS256 | RS256: one token, reused on every request
	Pool   string // "" | HS256 | RS256: rotate through a pool of distinct tokens
	// Session: the row logs in through oidc_login (the test OpenID
	// Provider, bench/work/testop, runs beside it) and every request
	// carries the session cookie
	Session bool
	Paths   bool // rotate through distinct paths
	// Target is the request target of the row's load and check request
	// ("": /items/1).
	Target string
	// Post: every request (the check request too) is a POST of the
	// bench's JSON document (configs/post-body.json, 982 bytes: 22
	// properties, nested objects and arrays, formats, patterns, enums)
	// with Content-Type application/json, to Target.
	Post bool
	// Proto is the load's protocol: "" (HTTP/1.1 in clear text, wrk at
	// 300 connections), protoH2 (HTTP/2 over TLS 1.3, h2load at 50
	// connections x 10 streams) or protoTLSH1 (HTTP/1.1 over TLS 1.3,
	// h2load at 300 connections) or protoH3 (HTTP/3, benchtool h3load at
	// 50 connections x 10 streams). The TLS rows' servers terminate TLS
	// 1.3 with the bench's ECDSA P-256 certificate and offer h2 and
	// http/1.1 (Caddy h3 too).
	Proto    string
	Baseline string // scenario whose throughput in the same round is this one's 100%
	// OptIn: left out of the default run (which must stay under 45
	// minutes on the 2-core machine); ALL=1 or ONLY= naming it runs it.
	OptIn bool
}

// Conf is what the config templates see.
type Conf struct {
	Port           int
	Admin          string
	Work           string
	Backend        string
	AuthAddr       string
	PermAddr       string
	AuditAddr      string
	NATSAddr       string
	Secret         string
	PubPEM         string
	Issuer         string
	Audience       string
	JWT            string   // "" | HS256 | RS256
	OIDC           bool     // gateway oidc_login (sessions in the config's file storage) against the test provider
	OIDCIssuer     string   // the test provider's issuer (filled in at run time)
	FwdAuth        bool     // nginx auth_request / Caddy forward_auth / Traefik ForwardAuth to the auth service
	RBAC           bool     // gateway rbac; HAProxy: the same roles rule on the verified token's claims
	RateLimit      bool     // gateway rate_limit; nginx limit_req; HAProxy stick table; Traefik rateLimit
	Perm           string   // "" | cached | nocache (gateway permission) | fwdauth (Traefik: a ForwardAuth to the permission service on every request)
	AuditSink      string   // "" | http | http1 | nats | natsjs
	AuditDisk      bool     // audit durability disk
	AuditSpool     string   // its spool_dir (emptied before each start)
	AuditChain     bool     // audit chain (tamper evidence)
	AuditKey       string   // the chain's key file
	ReloadRoute    string   // an extra route (operations: reload)
	Transport      string   // reverse_proxy transport: "" (Caddy's http) | h1
	FastPath       bool     // the gateway's apigate listener wrapper (the fast path; needs transport h1)
	TraefikDynamic string   // Traefik: its dynamic configuration file (set when starting it)
	TLSCert        string   // TLS 1.3 termination with this certificate ...
	TLSKey         string   // ... and key
	TLSPem         string   // (HAProxy: both in one file)
	HTTP2          bool     // with TLS: offer h2 by ALPN too (nginx listen ... http2, HAProxy alpn; Caddy and Traefik offer it by default)
	Gzip           bool     // compress answers (gzip, level 6) for clients that accept it
	Upstreams      []string // several upstreams (circuit breaking) instead of Backend
	FDLimit        int      // the open-file limit the servers run with
	MaxConn        int      // client connections a server must take: maxConns()
	AccessLog      bool     // a JSON access log to a file (gateway: Caddy's log with format json; nginx: access_log with a JSON log_format)
	AccessLogFile  string   // (set at run time; emptied before each start)
	OpenAPI        bool     // the gateway's openapi handler (request validation) against configs/openapi.yaml
	OpenAPISpec    string   // (set at run time: its copy in the work directory)
	Quota          bool     // the gateway's quota handler on a plan the benchmark never exhausts (counts in QuotaDir)
	QuotaDir       string   // (set at run time; emptied before each start)
	RateLimitFleet bool     // the gateway's fleet-exact rate limit: a quota handler's own plan per client, never reached, counted with the quota's leases on the bench's NATS (counts in QuotaDir)
}

// Target is a goal from issue 7, checked against the measured medians at
// 300 connections.
type Target struct {
	Name     string
	Scenario string
	Kind     string  // cost (<= Limit), ratio (>= Limit), cpu (CPU per request <= Limit x Against's), p99 (<= Limit x Against's), conns (<= Limit), rss (<= Against's), rssmax (<= Limit MB), anon (<= Against's + Limit MB)
	Against  string  // scenario the ratio is taken against (default: Baseline)
	Limit    float64 // fraction
	Report   bool    // reported only, no limit
}

// allDuties is the every-duty configuration: audit to HTTP (batched),
// jwt_auth HS256, rbac, rate_limit, permission cached.
var allDuties = Conf{AuditSink: "http", JWT: "HS256", RBAC: true, RateLimit: true, Perm: "cached"}

// fast puts a gateway configuration on the fast path: the apigate listener
// wrapper, with transport h1 (the only transport the plan proxies with).
// Whether the fast path then serves the server is the gateway's decision;
// the report says, per row, which path did (from the gateway's log and its
// gateway_fastpath_requests_total counter).
func fast(c Conf) Conf {
	c.FastPath, c.Transport = true, "h1"
	return c
}

func scenarios() []Scenario {
	all := allDuties
	allH1 := all
	allH1.Transport = "h1"
	return []Scenario{
		// 1. bare proxy
		{Name: "direct", Label: "backend directly (no proxy)", Group: "bare", Server: "direct"},
		{Name: "nginx", Label: "nginx 1.22", Group: "bare", Server: "nginx", Baseline: "direct"},
		{Name: "haproxy", Label: "HAProxy 2.6", Group: "bare", Server: "haproxy", Baseline: "direct"},
		{Name: "caddy", Label: "stock Caddy v2.11.9", Group: "bare", Server: "caddy", Baseline: "direct"},
		{Name: "traefik", Label: "Traefik " + traefikVersion, Group: "bare", Server: "traefik", Baseline: "direct"},
		{Name: "go-fasthttp", Label: "Go: fasthttp server + fasthttp client (engine-class reference, not a gateway)", Group: "bare", Server: "fastproxy", Baseline: "direct"},
		{Name: "gw", Label: "gateway, no duties", Group: "bare", Server: "gateway", Baseline: "caddy"},
		{Name: "gw-h1", Label: "gateway, no duties, transport h1", Group: "bare", Server: "gateway", Conf: Conf{Transport: "h1"}, Baseline: "caddy"},
		{Name: "gw-fast", Label: "gateway, no duties, apigate wrapper, transport h1", Group: "bare", Server: "gateway", Conf: fast(Conf{}), Baseline: "nginx"},
		// access logs, which nearly every production gateway keeps: a JSON
		// record per request to a file, on both
		{Name: "nginx-log", Label: "nginx 1.22, JSON access_log to a file", Group: "bare", Server: "nginx", Conf: Conf{AccessLog: true}, Baseline: "nginx"},
		{Name: "gw-fast-openapi", Label: "gateway, apigate wrapper, openapi request validation (path parameter), transport h1", Group: "bare", Server: "gateway", Conf: fast(Conf{OpenAPI: true}), Baseline: "gw-fast"},
		// issue 44: the openapi check of a path and a query parameter, and
		// of the 982-byte POST (beside the same POST on a plain route)
		{Name: "gw-fast-openapi-query", Label: "gateway, apigate wrapper, openapi request validation (path and query parameter), transport h1", Group: "bare", Server: "gateway", Conf: fast(Conf{OpenAPI: true}), Target: "/items/1?fields=name,price", Baseline: "gw-fast"},
		{Name: "gw-fast-post", Label: "gateway, no duties, apigate wrapper, POST of a 982-byte JSON document", Group: "bare", Server: "gateway", Conf: fast(Conf{}), Target: "/orders", Post: true, Baseline: "gw-fast"},
		{Name: "gw-fast-openapi-body", Label: "gateway, apigate wrapper, openapi request validation of the 982-byte JSON POST", Group: "bare", Server: "gateway", Conf: fast(Conf{OpenAPI: true}), Target: "/orders", Post: true, Baseline: "gw-fast-post"},
		{Name: "gw-fast-log", Label: "gateway, no duties, apigate wrapper, JSON access log to a file", Group: "bare", Server: "gateway", Conf: fast(Conf{AccessLog: true}), Baseline: "nginx-log"},

		// 2. authentication
		{Name: "gw-jwt-hs256", Label: "gateway jwt_auth HS256, one token", Group: "auth", Server: "gateway", Conf: Conf{JWT: "HS256"}, Token: "HS256", Baseline: "gw"},
		{Name: "gw-jwt-hs256-distinct", Label: "gateway jwt_auth HS256, distinct tokens", Group: "auth", Server: "gateway", Conf: Conf{JWT: "HS256"}, Pool: "HS256", Baseline: "gw"},
		{Name: "gw-jwt-rs256", Label: "gateway jwt_auth RS256, one token", Group: "auth", Server: "gateway", Conf: Conf{JWT: "RS256"}, Token: "RS256", Baseline: "gw"},
		{Name: "gw-jwt-rs256-distinct", Label: "gateway jwt_auth RS256, distinct tokens", Group: "auth", Server: "gateway", Conf: Conf{JWT: "RS256"}, Pool: "RS256", Baseline: "gw"},
		{Name: "gw-fast-jwt-hs256", Label: "gateway (apigate) jwt_auth HS256, one token", Group: "auth", Server: "gateway", Conf: fast(Conf{JWT: "HS256"}), Token: "HS256", Baseline: "gw-fast"},
		{Name: "gw-fast-session", Label: "gateway (apigate) oidc_login, one browser session", Group: "auth", Server: "gateway", Conf: fast(Conf{OIDC: true}), Session: true, Baseline: "gw-fast"},
		{Name: "gw-fast-jwt-hs256-distinct", Label: "gateway (apigate) jwt_auth HS256, distinct tokens", Group: "auth", Server: "gateway", Conf: fast(Conf{JWT: "HS256"}), Pool: "HS256", Baseline: "gw-fast"},
		{Name: "gw-fast-jwt-rs256", Label: "gateway (apigate) jwt_auth RS256, one token", Group: "auth", Server: "gateway", Conf: fast(Conf{JWT: "RS256"}), Token: "RS256", Baseline: "gw-fast"},
		{Name: "gw-fast-jwt-rs256-distinct", Label: "gateway (apigate) jwt_auth RS256, distinct tokens", Group: "auth", Server: "gateway", Conf: fast(Conf{JWT: "RS256"}), Pool: "RS256", Baseline: "gw-fast", OptIn: true},
		{Name: "haproxy-jwt-hs256", Label: "HAProxy jwt_verify HS256", Group: "auth", Server: "haproxy", Conf: Conf{JWT: "HS256"}, Token: "HS256", Baseline: "haproxy"},
		{Name: "haproxy-jwt-rs256", Label: "HAProxy jwt_verify RS256", Group: "auth", Server: "haproxy", Conf: Conf{JWT: "RS256"}, Token: "RS256", Baseline: "haproxy"},
		{Name: "nginx-authreq-hs256", Label: "nginx auth_request -> auth service, HS256", Group: "auth", Server: "nginx", Conf: Conf{FwdAuth: true}, Token: "HS256", Baseline: "nginx"},
		{Name: "nginx-authreq-rs256", Label: "nginx auth_request -> auth service, RS256", Group: "auth", Server: "nginx", Conf: Conf{FwdAuth: true}, Token: "RS256", Baseline: "nginx", OptIn: true},
		{Name: "caddy-fwdauth-hs256", Label: "Caddy forward_auth -> auth service, HS256", Group: "auth", Server: "caddy", Conf: Conf{FwdAuth: true}, Token: "HS256", Baseline: "caddy"},
		{Name: "caddy-fwdauth-rs256", Label: "Caddy forward_auth -> auth service, RS256", Group: "auth", Server: "caddy", Conf: Conf{FwdAuth: true}, Token: "RS256", Baseline: "caddy", OptIn: true},
		{Name: "traefik-fwdauth-hs256", Label: "Traefik ForwardAuth -> auth service, HS256", Group: "auth", Server: "traefik", Conf: Conf{FwdAuth: true}, Token: "HS256", Baseline: "traefik"},
		{Name: "traefik-fwdauth-rs256", Label: "Traefik ForwardAuth -> auth service, RS256", Group: "auth", Server: "traefik", Conf: Conf{FwdAuth: true}, Token: "RS256", Baseline: "traefik"},

		// 3. gateway duties, alone and together
		{Name: "gw-rbac", Label: "gateway jwt_auth HS256 + rbac", Group: "duties", Server: "gateway", Conf: Conf{JWT: "HS256", RBAC: true}, Token: "HS256", Baseline: "gw-jwt-hs256"},
		{Name: "gw-ratelimit", Label: "gateway rate_limit (not reached)", Group: "duties", Server: "gateway", Conf: Conf{RateLimit: true}, Baseline: "gw"},
		{Name: "gw-perm-cached", Label: "gateway jwt_auth + permission, cached", Group: "duties", Server: "gateway", Conf: Conf{JWT: "HS256", Perm: "cached"}, Token: "HS256", Baseline: "gw-jwt-hs256"},
		{Name: "gw-perm-nocache", Label: "gateway jwt_auth + permission, cache off, distinct paths", Group: "duties", Server: "gateway", Conf: Conf{JWT: "HS256", Perm: "nocache"}, Token: "HS256", Paths: true, Baseline: "gw-jwt-hs256", OptIn: true},
		{Name: "gw-audit-http", Label: "gateway audit -> HTTP, batch 500", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "http"}, Baseline: "gw"},
		{Name: "gw-audit-http-disk", Label: "gateway audit -> HTTP, batch 500, durability disk", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "http", AuditDisk: true}, Baseline: "gw-audit-http"},
		{Name: "gw-audit-http-chain", Label: "gateway audit -> HTTP, batch 500, chain (tamper evidence)", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "http", AuditChain: true}, Baseline: "gw-audit-http", OptIn: true},
		{Name: "gw-audit-http-1", Label: "gateway audit -> HTTP, batch_size 1", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "http1"}, Baseline: "gw", OptIn: true},
		{Name: "gw-audit-nats", Label: "gateway audit -> NATS core", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "nats"}, Baseline: "gw"},
		{Name: "gw-audit-natsjs", Label: "gateway audit -> NATS JetStream", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "natsjs"}, Baseline: "gw"},
		{Name: "gw-all", Label: "gateway all duties (audit HTTP, jwt HS256, rbac, rate_limit, permission cached)", Group: "duties", Server: "gateway", Conf: all, Token: "HS256", Baseline: "gw"},
		{Name: "gw-all-h1", Label: "gateway all duties, transport h1", Group: "duties", Server: "gateway", Conf: allH1, Token: "HS256", Baseline: "gw-h1"},
		{Name: "gw-fast-quota", Label: "gateway (apigate) jwt_auth HS256 + quota", Group: "duties", Server: "gateway", Conf: fast(Conf{JWT: "HS256", Quota: true}), Token: "HS256", Baseline: "gw-fast-jwt-hs256"},
		{Name: "gw-fast-ratelimit-fleet", Label: "gateway (apigate) rate limit across a fleet (quota's leases on NATS; not reached)", Group: "duties", Server: "gateway", Conf: fast(Conf{RateLimitFleet: true}), Baseline: "gw-fast"},
		{Name: "gw-fast-rbac", Label: "gateway (apigate) jwt_auth HS256 + rbac", Group: "duties", Server: "gateway", Conf: fast(Conf{JWT: "HS256", RBAC: true}), Token: "HS256", Baseline: "gw-fast-jwt-hs256"},
		{Name: "gw-fast-perm-nocache", Label: "gateway (apigate) jwt_auth + permission, cache off, distinct paths", Group: "duties", Server: "gateway", Conf: fast(Conf{JWT: "HS256", Perm: "nocache"}), Token: "HS256", Paths: true, Baseline: "gw-fast-jwt-hs256", OptIn: true},
		{Name: "gw-fast-audit-http", Label: "gateway (apigate) audit -> HTTP, batch 500", Group: "duties", Server: "gateway", Conf: fast(Conf{AuditSink: "http"}), Baseline: "gw-fast"},
		{Name: "gw-fast-audit-http-disk", Label: "gateway (apigate) audit -> HTTP, batch 500, durability disk", Group: "duties", Server: "gateway", Conf: fast(Conf{AuditSink: "http", AuditDisk: true}), Baseline: "gw-fast-audit-http", OptIn: true},
		{Name: "gw-fast-audit-http-chain", Label: "gateway (apigate) audit -> HTTP, batch 500, chain", Group: "duties", Server: "gateway", Conf: fast(Conf{AuditSink: "http", AuditChain: true}), Baseline: "gw-fast-audit-http", OptIn: true},
		{Name: "gw-fast-audit-nats", Label: "gateway (apigate) audit -> NATS core", Group: "duties", Server: "gateway", Conf: fast(Conf{AuditSink: "nats"}), Baseline: "gw-fast", OptIn: true},
		{Name: "gw-fast-audit-natsjs", Label: "gateway (apigate) audit -> NATS JetStream", Group: "duties", Server: "gateway", Conf: fast(Conf{AuditSink: "natsjs"}), Baseline: "gw-fast", OptIn: true},
		{Name: "gw-fast-all", Label: "gateway (apigate) all duties", Group: "duties", Server: "gateway", Conf: fast(all), Token: "HS256", Baseline: "gw-fast"},
		{Name: "traefik-ratelimit", Label: "Traefik rateLimit middleware (not reached)", Group: "duties", Server: "traefik", Conf: Conf{RateLimit: true}, Baseline: "traefik"},

		// the four steps (stepTable): the rows not above, each step on top
		// of the ones before it that the peer can do
		{Name: "gw-fast-steps-rl", Label: "gateway (apigate) jwt_auth HS256 + rbac + rate_limit", Group: "steps", Server: "gateway", Conf: fast(Conf{JWT: "HS256", RBAC: true, RateLimit: true}), Token: "HS256", Baseline: "gw-fast-rbac"},
		{Name: "gw-fast-steps-perm", Label: "gateway (apigate) jwt_auth HS256 + rbac + rate_limit + permission cached", Group: "steps", Server: "gateway", Conf: fast(Conf{JWT: "HS256", RBAC: true, RateLimit: true, Perm: "cached"}), Token: "HS256", Baseline: "gw-fast-steps-rl"},
		{Name: "traefik-steps-rl", Label: "Traefik ForwardAuth HS256 + rateLimit", Group: "steps", Server: "traefik", Conf: Conf{FwdAuth: true, RateLimit: true}, Token: "HS256", Baseline: "traefik-fwdauth-hs256"},
		{Name: "traefik-steps-perm", Label: "Traefik ForwardAuth HS256 + rateLimit + ForwardAuth -> permission service", Group: "steps", Server: "traefik", Conf: Conf{FwdAuth: true, RateLimit: true, Perm: "fwdauth"}, Token: "HS256", Baseline: "traefik-steps-rl"},
		{Name: "nginx-steps-rl", Label: "nginx auth_request HS256 + limit_req", Group: "steps", Server: "nginx", Conf: Conf{FwdAuth: true, RateLimit: true}, Token: "HS256", Baseline: "nginx-authreq-hs256"},
		{Name: "haproxy-steps-rbac", Label: "HAProxy jwt_verify HS256 + roles rule", Group: "steps", Server: "haproxy", Conf: Conf{JWT: "HS256", RBAC: true}, Token: "HS256", Baseline: "haproxy-jwt-hs256"},
		{Name: "haproxy-steps-rl", Label: "HAProxy jwt_verify HS256 + roles rule + stick-table rate limit", Group: "steps", Server: "haproxy", Conf: Conf{JWT: "HS256", RBAC: true, RateLimit: true}, Token: "HS256", Baseline: "haproxy-steps-rbac"},

		// 3c. over TLS 1.3 (issue 36): HTTP/2, bare and with every duty
		// each proxy can do (the duties of its four-step rows), and
		// HTTP/1.1 over TLS beside it; opt-in (ONLY=h2 runs them all)
		tlsRow(Scenario{Name: "nginx-h2", Label: "nginx 1.22, HTTP/2", Server: "nginx"}, protoH2),
		tlsRow(Scenario{Name: "haproxy-h2", Label: "HAProxy 2.6, HTTP/2", Server: "haproxy"}, protoH2),
		tlsRow(Scenario{Name: "traefik-h2", Label: "Traefik " + traefikVersion + ", HTTP/2", Server: "traefik"}, protoH2),
		tlsRow(Scenario{Name: "caddy-h2", Label: "stock Caddy v2.11.9, HTTP/2", Server: "caddy"}, protoH2),
		tlsRow(Scenario{Name: "gw-caddy-h2", Label: "gateway, no duties, no apigate wrapper (Caddy's path), transport h1, HTTP/2", Server: "gateway", Conf: Conf{Transport: "h1"}, Baseline: "caddy-h2"}, protoH2),
		tlsRow(Scenario{Name: "gw-fast-h2", Label: "gateway, no duties, apigate wrapper, transport h1, HTTP/2", Server: "gateway", Conf: fast(Conf{}), Baseline: "nginx-h2"}, protoH2),
		tlsRow(Scenario{Name: "nginx-all-h2", Label: "nginx auth_request HS256 + limit_req (every duty nginx does), HTTP/2", Server: "nginx", Conf: Conf{FwdAuth: true, RateLimit: true}, Token: "HS256", Baseline: "nginx-h2"}, protoH2),
		tlsRow(Scenario{Name: "haproxy-all-h2", Label: "HAProxy jwt_verify HS256 + roles rule + stick-table rate limit (every duty HAProxy does), HTTP/2", Server: "haproxy", Conf: Conf{JWT: "HS256", RBAC: true, RateLimit: true}, Token: "HS256", Baseline: "haproxy-h2"}, protoH2),
		tlsRow(Scenario{Name: "traefik-all-h2", Label: "Traefik ForwardAuth HS256 + rateLimit + ForwardAuth -> permission service (every duty Traefik does), HTTP/2", Server: "traefik", Conf: Conf{FwdAuth: true, RateLimit: true, Perm: "fwdauth"}, Token: "HS256", Baseline: "traefik-h2"}, protoH2),
		tlsRow(Scenario{Name: "gw-caddy-all-h2", Label: "gateway all duties, no apigate wrapper (Caddy's path), transport h1, HTTP/2", Server: "gateway", Conf: allH1, Token: "HS256", Baseline: "gw-caddy-h2"}, protoH2),
		tlsRow(Scenario{Name: "gw-fast-all-h2", Label: "gateway (apigate) all duties, HTTP/2", Server: "gateway", Conf: fast(all), Token: "HS256", Baseline: "gw-fast-h2"}, protoH2),
		// HTTP/3 stays on Caddy's path (issue 36): its measured cost
		tlsRow(Scenario{Name: "gw-fast-h3", Label: "gateway, no duties, apigate wrapper, transport h1, HTTP/3 (Caddy's QUIC server)", Server: "gateway", Conf: fast(Conf{}), Baseline: "gw-fast-h2"}, protoH3),
		tlsRow(Scenario{Name: "nginx-tls-h1", Label: "nginx 1.22, HTTP/1.1 over TLS", Server: "nginx"}, protoTLSH1),
		tlsRow(Scenario{Name: "haproxy-tls-h1", Label: "HAProxy 2.6, HTTP/1.1 over TLS", Server: "haproxy"}, protoTLSH1),
		tlsRow(Scenario{Name: "gw-fast-tls-h1", Label: "gateway, no duties, apigate wrapper, transport h1, HTTP/1.1 over TLS", Server: "gateway", Conf: fast(Conf{}), Baseline: "nginx-tls-h1"}, protoTLSH1),
	}
}

// tlsRow makes s a row of group 3c: loaded over TLS 1.3 with proto by
// h2load, opt-in (ONLY=h2 runs every such row).
func tlsRow(s Scenario, proto string) Scenario {
	s.Group, s.Proto, s.OptIn = "tls", proto, true
	return s
}

func targets() []Target {
	return []Target{
		{Name: "JWT HS256 cost", Scenario: "gw-jwt-hs256", Kind: "cost", Limit: 0.05},
		{Name: "JWT RS256 cost, token reused", Scenario: "gw-jwt-rs256", Kind: "cost", Limit: 0.05},
		{Name: "JWT HS256 cost, distinct tokens", Scenario: "gw-jwt-hs256-distinct", Kind: "cost", Report: true},
		{Name: "JWT RS256 cost, distinct tokens", Scenario: "gw-jwt-rs256-distinct", Kind: "cost", Report: true},
		{Name: "rbac cost (vs jwt_auth alone)", Scenario: "gw-rbac", Kind: "cost", Limit: 0.005},
		{Name: "rate_limit cost", Scenario: "gw-ratelimit", Kind: "cost", Limit: 0.02},
		{Name: "permission cached cost (vs jwt_auth alone)", Scenario: "gw-perm-cached", Kind: "cost", Limit: 0.01},
		{Name: "permission cache off cost (vs jwt_auth alone)", Scenario: "gw-perm-nocache", Kind: "cost", Report: true},
		{Name: "audit HTTP batched cost", Scenario: "gw-audit-http", Kind: "cost", Limit: 0.03},
		{Name: "audit HTTP batch_size 1 cost", Scenario: "gw-audit-http-1", Kind: "cost", Report: true},
		// issue 17: durability disk, and the audit app's memory
		{Name: "audit durability disk cost (vs memory, batched HTTP)", Scenario: "gw-audit-http-disk", Kind: "cost", Limit: 0.03},
		{Name: "audit chain cost (vs without, batched HTTP)", Scenario: "gw-audit-http-chain", Kind: "cost", Report: true},
		{Name: "audit app heap and stacks at 300 connections (queue_size 65536)", Scenario: "gw-audit-http", Kind: "anon", Against: "gw", Limit: 10},
		{Name: "audit NATS core cost", Scenario: "gw-audit-nats", Kind: "cost", Limit: 0.03},
		{Name: "audit NATS JetStream cost", Scenario: "gw-audit-natsjs", Kind: "cost", Limit: 0.03},
		{Name: "all duties, share of bare gateway", Scenario: "gw-all", Kind: "ratio", Limit: 0.85},
		{Name: "gateway no duties, share of stock Caddy", Scenario: "gw", Kind: "ratio", Against: "caddy", Limit: 0.98},
		{Name: "all duties vs Caddy + forward_auth (HS256)", Scenario: "gw-all", Kind: "ratio", Against: "caddy-fwdauth-hs256", Limit: 2.0},
		{Name: "peak memory, all duties, 300 connections", Scenario: "gw-all", Kind: "rssmax", Limit: 80},
		// issue 14: the h1 transport
		{Name: "transport h1, no duties, vs stock Caddy", Scenario: "gw-h1", Kind: "ratio", Against: "caddy", Limit: 2.0},
		{Name: "transport h1, no duties, P99 vs nginx", Scenario: "gw-h1", Kind: "p99", Against: "nginx", Limit: 1.5},
		{Name: "transport h1, all duties, vs all duties with transport http", Scenario: "gw-all-h1", Kind: "ratio", Against: "gw-all", Limit: 1.8},
		{Name: "transport h1, all duties, vs nginx + auth_request (HS256)", Scenario: "gw-all-h1", Kind: "ratio", Against: "nginx-authreq-hs256", Report: true},
		{Name: "transport h1, all duties, vs HAProxy + jwt_verify (HS256)", Scenario: "gw-all-h1", Kind: "ratio", Against: "haproxy-jwt-hs256", Report: true},
		{Name: "transport h1: upstream connections opened per run", Scenario: "gw-h1", Kind: "conns", Limit: 300},
		{Name: "transport h1: peak memory vs transport http", Scenario: "gw-h1", Kind: "rss", Against: "gw"},
		// issue 23: the fast path, no duties
		{Name: "fast path, no duties, vs nginx", Scenario: "gw-fast", Kind: "ratio", Against: "nginx", Limit: 0.7},
		{Name: "fast path, no duties, P99 vs nginx", Scenario: "gw-fast", Kind: "p99", Against: "nginx", Limit: 1.5},
		{Name: "fast path: upstream connections opened per run", Scenario: "gw-fast", Kind: "conns", Limit: 300},
		{Name: "fast path: peak memory vs Caddy's path (transport h1)", Scenario: "gw-fast", Kind: "rss", Against: "gw-h1"},
		{Name: "fast path, no duties, vs the fasthttp server + client (engine class)", Scenario: "gw-fast", Kind: "ratio", Against: "go-fasthttp", Report: true},
		// issue 24: every duty on the fast path
		{Name: "fast path, every duty, vs HAProxy + jwt_verify (HS256)", Scenario: "gw-fast-all", Kind: "ratio", Against: "haproxy-jwt-hs256", Limit: 1.0},
		{Name: "fast path, every duty, vs nginx + auth_request (HS256)", Scenario: "gw-fast-all", Kind: "ratio", Against: "nginx-authreq-hs256", Limit: 1.5},
		{Name: "fast path, every duty, share of the fast path's bare rate", Scenario: "gw-fast-all", Kind: "ratio", Against: "gw-fast", Limit: 0.8},
		{Name: "fast path, every duty: peak memory, 300 connections", Scenario: "gw-fast-all", Kind: "rssmax", Limit: 80},
		{Name: "fast path: JWT HS256 cost", Scenario: "gw-fast-jwt-hs256", Kind: "cost", Report: true},
		{Name: "fast path: JWT RS256 cost, token reused", Scenario: "gw-fast-jwt-rs256", Kind: "cost", Report: true},
		{Name: "fast path: JWT HS256 cost, distinct tokens", Scenario: "gw-fast-jwt-hs256-distinct", Kind: "cost", Report: true},
		{Name: "fast path: JWT RS256 cost, distinct tokens", Scenario: "gw-fast-jwt-rs256-distinct", Kind: "cost", Report: true},
		{Name: "fast path: rbac cost (vs jwt_auth alone)", Scenario: "gw-fast-rbac", Kind: "cost", Report: true},
		{Name: "fast path: rate_limit cost (vs jwt_auth + rbac)", Scenario: "gw-fast-steps-rl", Kind: "cost", Report: true},
		{Name: "fast path: permission cached cost (vs jwt_auth + rbac + rate_limit)", Scenario: "gw-fast-steps-perm", Kind: "cost", Report: true},
		{Name: "fast path: permission cache off cost (vs jwt_auth alone)", Scenario: "gw-fast-perm-nocache", Kind: "cost", Report: true},
		{Name: "fast path: audit HTTP batched cost", Scenario: "gw-fast-audit-http", Kind: "cost", Report: true},
		{Name: "fast path: audit durability disk cost (vs memory)", Scenario: "gw-fast-audit-http-disk", Kind: "cost", Report: true},
		{Name: "fast path: audit chain cost (vs without)", Scenario: "gw-fast-audit-http-chain", Kind: "cost", Report: true},
		{Name: "fast path: audit NATS core cost", Scenario: "gw-fast-audit-nats", Kind: "cost", Report: true},
		{Name: "fast path: audit NATS JetStream cost", Scenario: "gw-fast-audit-natsjs", Kind: "cost", Report: true},
		{Name: "fast path: audit HTTP cost on top of the other duties", Scenario: "gw-fast-all", Kind: "cost", Against: "gw-fast-steps-perm", Report: true},
		// issue 31: cost per request (the proxy's own CPU over the requests
		// served), which holds where req/s measures the load side
		{Name: "fast path, no duties: CPU per request vs the fasthttp proxy", Scenario: "gw-fast", Kind: "cpu", Against: "go-fasthttp", Limit: 1.15},
		{Name: "fast path, no duties: CPU per request vs nginx", Scenario: "gw-fast", Kind: "cpu", Against: "nginx", Limit: 1.3},
		{Name: "fast path, no duties, vs the fasthttp proxy (both saturated)", Scenario: "gw-fast", Kind: "ratio", Against: "go-fasthttp", Limit: 0.9},
		{Name: "fast path, every duty: CPU per request vs the fast path bare", Scenario: "gw-fast-all", Kind: "cpu", Against: "gw-fast", Limit: 1.25},
		{Name: "fast path: JWT HS256, CPU per request vs bare", Scenario: "gw-fast-jwt-hs256", Kind: "cpu", Against: "gw-fast", Limit: 1.05},
		{Name: "fast path: browser session, CPU per request vs jwt_auth", Scenario: "gw-fast-session", Kind: "cpu", Against: "gw-fast-jwt-hs256", Limit: 1.1},
		{Name: "fast path: rbac, CPU per request vs jwt_auth alone", Scenario: "gw-fast-rbac", Kind: "cpu", Against: "gw-fast-jwt-hs256", Limit: 1.01},
		{Name: "fast path: rate_limit, CPU per request vs jwt_auth + rbac", Scenario: "gw-fast-steps-rl", Kind: "cpu", Against: "gw-fast-rbac", Limit: 1.02},
		{Name: "fast path: permission cached, CPU per request vs jwt_auth + rbac + rate_limit", Scenario: "gw-fast-steps-perm", Kind: "cpu", Against: "gw-fast-steps-rl", Limit: 1.01},
		// issue 33: counting and enforcing a consumer's plan costs at most 3%
		// CPU per request over the same route without it
		{Name: "fast path, quota: CPU per request vs jwt_auth alone", Scenario: "gw-fast-quota", Kind: "cpu", Against: "gw-fast-jwt-hs256", Limit: 1.03},
		// issue 47: a rate limit that holds for the fleet (a quota
		// handler's own plan, counted with leases over NATS) costs at most
		// 3% CPU per request over the same route without a limit
		{Name: "fast path, rate limit across a fleet: CPU per request vs the route without a limit", Scenario: "gw-fast-ratelimit-fleet", Kind: "cpu", Against: "gw-fast", Limit: 1.03},
		{Name: "fast path: audit HTTP batched, CPU per request vs bare", Scenario: "gw-fast-audit-http", Kind: "cpu", Against: "gw-fast", Limit: 1.05},
		// issue 34: request validation against an OpenAPI document costs at
		// most 10% CPU per request over the same route without it
		{Name: "fast path, openapi request validation: CPU per request vs bare", Scenario: "gw-fast-openapi", Kind: "cpu", Against: "gw-fast", Limit: 1.10},
		// issue 44: a validated 1 KB POST costs at most 1.15x the same POST
		// through a plain route; a GET with path and query parameters at
		// most 1.05x the bare fast path
		{Name: "fast path, openapi validation of a 1 KB JSON POST: CPU per request vs the same POST without", Scenario: "gw-fast-openapi-body", Kind: "cpu", Against: "gw-fast-post", Limit: 1.15},
		{Name: "fast path, openapi path and query parameters: CPU per request vs bare", Scenario: "gw-fast-openapi-query", Kind: "cpu", Against: "gw-fast", Limit: 1.05},
		{Name: "fast path, JSON access log: CPU per request vs nginx with access_log", Scenario: "gw-fast-log", Kind: "cpu", Against: "nginx-log", Limit: 1.3},
		{Name: "fast path, JSON access log, vs nginx with access_log", Scenario: "gw-fast-log", Kind: "ratio", Against: "nginx-log", Limit: 0.7},
		// issue 26: against Traefik
		{Name: "gateway fast path, no duties, vs Traefik", Scenario: "gw-fast", Kind: "ratio", Against: "traefik", Report: true},
		{Name: "gateway fast path, every duty, vs Traefik + ForwardAuth (HS256)", Scenario: "gw-fast-all", Kind: "ratio", Against: "traefik-fwdauth-hs256", Report: true},
		// issue 36: HTTP/2 over TLS 1.3 (h2load, 50 connections x 10
		// streams), the fast path's row against the peers' and its own
		// bare row
		{Name: "HTTP/2, fast path, no duties: CPU per request vs nginx", Scenario: "gw-fast-h2", Kind: "cpu", Against: "nginx-h2", Limit: 1.3},
		{Name: "HTTP/2, fast path, no duties: CPU per request vs HAProxy", Scenario: "gw-fast-h2", Kind: "cpu", Against: "haproxy-h2", Limit: 1.6},
		{Name: "HTTP/2, fast path, no duties, vs nginx", Scenario: "gw-fast-h2", Kind: "ratio", Against: "nginx-h2", Limit: 0.7},
		{Name: "HTTP/2, fast path, every duty: CPU per request vs its bare route", Scenario: "gw-fast-all-h2", Kind: "cpu", Against: "gw-fast-h2", Limit: 1.25},
		{Name: "HTTP/2, fast path, no duties: CPU per request vs Caddy's path", Scenario: "gw-fast-h2", Kind: "cpu", Against: "gw-caddy-h2", Report: true},
		{Name: "HTTP/2, fast path, no duties: CPU per request vs Traefik", Scenario: "gw-fast-h2", Kind: "cpu", Against: "traefik-h2", Report: true},
		{Name: "HTTP/2, fast path, every duty: CPU per request vs HAProxy + jwt_verify, roles, stick table", Scenario: "gw-fast-all-h2", Kind: "cpu", Against: "haproxy-all-h2", Report: true},
		{Name: "HTTP/2, fast path, every duty: CPU per request vs nginx + auth_request, limit_req", Scenario: "gw-fast-all-h2", Kind: "cpu", Against: "nginx-all-h2", Report: true},
		{Name: "HTTP/3 (Caddy's path), no duties: CPU per request vs HTTP/2 with the wrapper", Scenario: "gw-fast-h3", Kind: "cpu", Against: "gw-fast-h2", Report: true},
		{Name: "HTTP/1.1 over TLS, fast path, no duties: CPU per request vs nginx", Scenario: "gw-fast-tls-h1", Kind: "cpu", Against: "nginx-tls-h1", Report: true},
		{Name: "HTTP/1.1 over TLS, fast path, no duties, vs nginx", Scenario: "gw-fast-tls-h1", Kind: "ratio", Against: "nginx-tls-h1", Report: true},
	}
}

// Levels are the client connections of a row's measured runs (the keys
// of its samples' At): connLevels, or h2Conns for an HTTP/2 row (each
// connection carries h2Streams streams).
func (s Scenario) Levels() []int {
	if s.Proto == protoH2 || s.Proto == protoH3 {
		return []int{h2Conns}
	}
	return connLevels
}

// loadStr says how a row is loaded, for the report.
func (s Scenario) loadStr() string {
	switch s.Proto {
	case protoH2:
		return fmt.Sprintf("h2load, HTTP/2 over TLS 1.3, %d connections x %d streams", h2Conns, h2Streams)
	case protoTLSH1:
		return fmt.Sprintf("h2load --h1, HTTP/1.1 over TLS 1.3, %d connections", connLevels[0])
	case protoH3:
		return fmt.Sprintf("benchtool h3load (quic-go), HTTP/3, %d connections x %d streams", h2Conns, h2Streams)
	}
	return fmt.Sprintf("wrk, %d connections", connLevels[0])
}

func scenarioByName(name string) (Scenario, bool) {
	for _, s := range scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
