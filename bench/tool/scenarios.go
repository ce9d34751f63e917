package main

// Scenario is one configuration under load.
type Scenario struct {
	Name     string // id, used in tables and the chart
	Label    string // what it is, in words
	Group    string // bare | auth | duties
	Server   string // direct | nginx | haproxy | caddy | gateway
	Conf     Conf   // template data (Port and addresses are filled in at run time)
	Token    string // "" | HS256 | RS256: one token, reused on every request
	Pool     string // "" | HS256 | RS256: rotate through a pool of distinct tokens
	Paths    bool   // rotate through distinct paths
	Baseline string // scenario whose throughput in the same round is this one's 100%
}

// Conf is what the config templates see.
type Conf struct {
	Port        int
	Admin       string
	Work        string
	Backend     string
	AuthAddr    string
	PermAddr    string
	AuditAddr   string
	NATSAddr    string
	Secret      string
	PubPEM      string
	Issuer      string
	Audience    string
	JWT         string // "" | HS256 | RS256
	FwdAuth     bool   // nginx auth_request / Caddy forward_auth to the auth service
	RBAC        bool
	RateLimit   bool
	Perm        string   // "" | cached | nocache
	AuditSink   string   // "" | http | http1 | nats | natsjs
	AuditDisk   bool     // audit durability disk
	AuditSpool  string   // its spool_dir (emptied before each start)
	AuditChain  bool     // audit chain (tamper evidence)
	AuditKey    string   // the chain's key file
	ReloadRoute string   // an extra route (operations: reload)
	Transport   string   // reverse_proxy transport: "" (Caddy's http) | h1
	TLSCert     string   // TLS 1.3 termination with this certificate ...
	TLSKey      string   // ... and key
	TLSPem      string   // (HAProxy: both in one file)
	Gzip        bool     // compress answers (gzip, level 6) for clients that accept it
	Upstreams   []string // several upstreams (circuit breaking) instead of Backend
	FDLimit     int      // the open-file limit the servers run with
	MaxConn     int      // client connections a server must take: maxConns()
}

// Target is a goal from issue 7, checked against the measured medians at
// 300 connections.
type Target struct {
	Name     string
	Scenario string
	Kind     string  // cost (<= Limit), ratio (>= Limit), p99 (<= Limit x Against's), conns (<= Limit), rss (<= Against's), anon (<= Against's + Limit MB)
	Against  string  // scenario the ratio is taken against (default: Baseline)
	Limit    float64 // fraction
	Report   bool    // reported only, no limit
}

func scenarios() []Scenario {
	return []Scenario{
		// 1. bare proxy
		{Name: "direct", Label: "backend directly (no proxy)", Group: "bare", Server: "direct"},
		{Name: "nginx", Label: "nginx 1.22", Group: "bare", Server: "nginx", Baseline: "direct"},
		{Name: "haproxy", Label: "HAProxy 2.6", Group: "bare", Server: "haproxy", Baseline: "direct"},
		{Name: "caddy", Label: "stock Caddy v2.11.9", Group: "bare", Server: "caddy", Baseline: "direct"},
		{Name: "gw", Label: "gateway, no duties", Group: "bare", Server: "gateway", Baseline: "caddy"},
		{Name: "gw-h1", Label: "gateway, no duties, transport h1", Group: "bare", Server: "gateway", Conf: Conf{Transport: "h1"}, Baseline: "caddy"},

		// 2. authentication
		{Name: "gw-jwt-hs256", Label: "gateway jwt_auth HS256, one token", Group: "auth", Server: "gateway", Conf: Conf{JWT: "HS256"}, Token: "HS256", Baseline: "gw"},
		{Name: "gw-jwt-hs256-distinct", Label: "gateway jwt_auth HS256, distinct tokens", Group: "auth", Server: "gateway", Conf: Conf{JWT: "HS256"}, Pool: "HS256", Baseline: "gw"},
		{Name: "gw-jwt-rs256", Label: "gateway jwt_auth RS256, one token", Group: "auth", Server: "gateway", Conf: Conf{JWT: "RS256"}, Token: "RS256", Baseline: "gw"},
		{Name: "gw-jwt-rs256-distinct", Label: "gateway jwt_auth RS256, distinct tokens", Group: "auth", Server: "gateway", Conf: Conf{JWT: "RS256"}, Pool: "RS256", Baseline: "gw"},
		{Name: "haproxy-jwt-hs256", Label: "HAProxy jwt_verify HS256", Group: "auth", Server: "haproxy", Conf: Conf{JWT: "HS256"}, Token: "HS256", Baseline: "haproxy"},
		{Name: "haproxy-jwt-rs256", Label: "HAProxy jwt_verify RS256", Group: "auth", Server: "haproxy", Conf: Conf{JWT: "RS256"}, Token: "RS256", Baseline: "haproxy"},
		{Name: "nginx-authreq-hs256", Label: "nginx auth_request -> auth service, HS256", Group: "auth", Server: "nginx", Conf: Conf{FwdAuth: true}, Token: "HS256", Baseline: "nginx"},
		{Name: "nginx-authreq-rs256", Label: "nginx auth_request -> auth service, RS256", Group: "auth", Server: "nginx", Conf: Conf{FwdAuth: true}, Token: "RS256", Baseline: "nginx"},
		{Name: "caddy-fwdauth-hs256", Label: "Caddy forward_auth -> auth service, HS256", Group: "auth", Server: "caddy", Conf: Conf{FwdAuth: true}, Token: "HS256", Baseline: "caddy"},
		{Name: "caddy-fwdauth-rs256", Label: "Caddy forward_auth -> auth service, RS256", Group: "auth", Server: "caddy", Conf: Conf{FwdAuth: true}, Token: "RS256", Baseline: "caddy"},

		// 3. gateway duties, alone and together
		{Name: "gw-rbac", Label: "gateway jwt_auth HS256 + rbac", Group: "duties", Server: "gateway", Conf: Conf{JWT: "HS256", RBAC: true}, Token: "HS256", Baseline: "gw-jwt-hs256"},
		{Name: "gw-ratelimit", Label: "gateway rate_limit (not reached)", Group: "duties", Server: "gateway", Conf: Conf{RateLimit: true}, Baseline: "gw"},
		{Name: "gw-perm-cached", Label: "gateway jwt_auth + permission, cached", Group: "duties", Server: "gateway", Conf: Conf{JWT: "HS256", Perm: "cached"}, Token: "HS256", Baseline: "gw-jwt-hs256"},
		{Name: "gw-perm-nocache", Label: "gateway jwt_auth + permission, cache off, distinct paths", Group: "duties", Server: "gateway", Conf: Conf{JWT: "HS256", Perm: "nocache"}, Token: "HS256", Paths: true, Baseline: "gw-jwt-hs256"},
		{Name: "gw-audit-http", Label: "gateway audit -> HTTP, batch 500", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "http"}, Baseline: "gw"},
		{Name: "gw-audit-http-disk", Label: "gateway audit -> HTTP, batch 500, durability disk", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "http", AuditDisk: true}, Baseline: "gw-audit-http"},
		{Name: "gw-audit-http-chain", Label: "gateway audit -> HTTP, batch 500, chain (tamper evidence)", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "http", AuditChain: true}, Baseline: "gw-audit-http"},
		{Name: "gw-audit-http-1", Label: "gateway audit -> HTTP, batch_size 1", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "http1"}, Baseline: "gw"},
		{Name: "gw-audit-nats", Label: "gateway audit -> NATS core", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "nats"}, Baseline: "gw"},
		{Name: "gw-audit-natsjs", Label: "gateway audit -> NATS JetStream", Group: "duties", Server: "gateway", Conf: Conf{AuditSink: "natsjs"}, Baseline: "gw"},
		{Name: "gw-all", Label: "gateway all duties (audit HTTP, jwt HS256, rbac, rate_limit, permission cached)", Group: "duties", Server: "gateway",
			Conf: Conf{AuditSink: "http", JWT: "HS256", RBAC: true, RateLimit: true, Perm: "cached"}, Token: "HS256", Baseline: "gw"},
		{Name: "gw-all-h1", Label: "gateway all duties, transport h1", Group: "duties", Server: "gateway",
			Conf: Conf{AuditSink: "http", JWT: "HS256", RBAC: true, RateLimit: true, Perm: "cached", Transport: "h1"}, Token: "HS256", Baseline: "gw-h1"},
	}
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
		// issue 14: the h1 transport
		{Name: "transport h1, no duties, vs stock Caddy", Scenario: "gw-h1", Kind: "ratio", Against: "caddy", Limit: 2.0},
		{Name: "transport h1, no duties, P99 vs nginx", Scenario: "gw-h1", Kind: "p99", Against: "nginx", Limit: 1.5},
		{Name: "transport h1, all duties, vs all duties with transport http", Scenario: "gw-all-h1", Kind: "ratio", Against: "gw-all", Limit: 1.8},
		{Name: "transport h1, all duties, vs nginx + auth_request (HS256)", Scenario: "gw-all-h1", Kind: "ratio", Against: "nginx-authreq-hs256", Report: true},
		{Name: "transport h1, all duties, vs HAProxy + jwt_verify (HS256)", Scenario: "gw-all-h1", Kind: "ratio", Against: "haproxy-jwt-hs256", Report: true},
		{Name: "transport h1: upstream connections opened per run", Scenario: "gw-h1", Kind: "conns", Limit: 300},
		{Name: "transport h1: peak memory vs transport http", Scenario: "gw-h1", Kind: "rss", Against: "gw"},
	}
}

func scenarioByName(name string) (Scenario, bool) {
	for _, s := range scenarios() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}
