package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TraefikMiddlewares are the names of the Traefik middlewares a scenario
// uses, in order (configs/traefik-dynamic.yml.tmpl defines them).
func (c Conf) TraefikMiddlewares() []string {
	var m []string
	if c.Gzip {
		m = append(m, "compress")
	}
	if c.Upstreams != nil {
		m = append(m, "retry")
	}
	if c.FwdAuth {
		m = append(m, "auth")
	}
	if c.RateLimit {
		m = append(m, "ratelimit")
	}
	if c.Perm == "fwdauth" {
		m = append(m, "perm")
	}
	return m
}

// startTraefik renders Traefik's static and dynamic configuration and
// starts it pinned to the proxy core with GOMAXPROCS=1.
func (b *Bench) startTraefik(c Conf, tag, log string) (*Proc, error) {
	if _, err := os.Stat(b.Traefik); err != nil {
		return nil, fmt.Errorf("traefik binary missing: %s (bench/build-traefik builds it)", b.Traefik)
	}
	c.TraefikDynamic = filepath.Join(b.confDir, tag+".traefik-dynamic.yml")
	if err := b.render("traefik-dynamic.yml.tmpl", c.TraefikDynamic, c); err != nil {
		return nil, err
	}
	static := filepath.Join(b.confDir, tag+".traefik.yml")
	if err := b.render("traefik.yml.tmpl", static, c); err != nil {
		return nil, err
	}
	return startPinned(tag, coreGateway, log, []string{"GOMAXPROCS=1"}, b.Traefik, "--configFile="+static)
}

// TraefikBuild is what the report says of the Traefik peer: how it was
// built here (bench/build-traefik's notes file) and configured.
type TraefikBuild struct {
	Notes   []string `json:"notes"`
	Changes []string `json:"changes"`
	Err     string   `json:"error,omitempty"`
}

// traefikBuild reads bench/work/traefik-build.txt.
func (b *Bench) traefikBuild() *TraefikBuild {
	t := &TraefikBuild{}
	data, err := os.ReadFile(filepath.Join(b.Work, "traefik-build.txt"))
	if err != nil {
		t.Err = "bench/build-traefik has not built it: " + err.Error()
		return t
	}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if c, ok := strings.CutPrefix(l, "change "); ok {
			t.Changes = append(t.Changes, c)
		} else if l != "" {
			t.Notes = append(t.Notes, l)
		}
	}
	return t
}

func (r *Report) traefikMarkdown(p func(string, ...any)) {
	t := r.Traefik
	p("## Traefik: how it was built and configured")
	p("")
	if t.Err != "" {
		p("Not built: %s. Its rows say so.", t.Err)
		p("")
		return
	}
	p("Traefik is not packaged by Debian: `bench/build-traefik` builds it once from its Go module (through the Go module proxy), into bench/work/ (%s). "+
		"`go install` refuses the module (its go.mod has `replace` lines), so it is built in a writable copy of the module's source with `GOFLAGS=-mod=mod`, after these changes to that copy:", strings.Join(t.Notes, "; "))
	p("")
	for _, c := range t.Changes {
		p("- %s", c)
	}
	p("")
	p("None of these is on the HTTP path measured: the router, the ForwardAuth, rateLimit and compress middlewares, the load balancer, the TLS termination and the Docker provider are Traefik's own code, unchanged. " +
		"Configuration (bench/configs/traefik*.yml.tmpl), per Traefik's documentation for a reverse proxy: the file provider without watching, no access log, no metrics, no dashboard, `serversTransport.maxIdleConnsPerHost: 1024` (the default keeps 200 idle upstream connections), one router for every path; " +
		"it runs pinned to core 1 with `GOMAXPROCS=1`. Its ForwardAuth middleware makes its calls with Go's default HTTP transport, which keeps 2 idle connections per host; Traefik has no option to change that (only a TLS configuration gives it a transport of its own), so at 300 connections most auth calls open a new connection. " +
		"The compress middleware has no level option (the gzip rows compare its default with the others' level 6).")
	p("")
}
