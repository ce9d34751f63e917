package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// OpsResult holds the operations measurements, in milliseconds.
type OpsResult struct {
	ColdStart map[string][]float64 `json:"cold_start_ms"` // server -> samples
	Reload    map[string][]float64 `json:"reload_ms"`     // server -> samples: POST /load sent -> new route 200
	LoadCall  map[string][]float64 `json:"load_call_ms"`  // server -> samples: POST /load round trip
	Errors    []string             `json:"errors,omitempty"`
}

const opsReps = 5

// operations measures cold start to the first 200 and an admin API reload
// to a new route serving.
func (b *Bench) operations() {
	o := &OpsResult{ColdStart: map[string][]float64{}, Reload: map[string][]float64{}, LoadCall: map[string][]float64{}}
	b.report.Ops = o
	progress("operations: cold start to first 200 (%d times each)", opsReps)
	type cs struct {
		key string
		s   Scenario
	}
	list := []cs{
		{"gateway, no duties", Scenario{Name: "ops-gw", Server: "gateway"}},
		{"gateway, all duties", Scenario{Name: "ops-gw-all", Server: "gateway", Conf: allDuties, Token: "HS256"}},
		{"stock Caddy", Scenario{Name: "ops-caddy", Server: "caddy"}},
		{"nginx", Scenario{Name: "ops-nginx", Server: "nginx"}},
		{"HAProxy", Scenario{Name: "ops-haproxy", Server: "haproxy"}},
		{"Traefik", Scenario{Name: "ops-traefik", Server: "traefik"}},
		{"gateway, apigate wrapper, no duties", Scenario{Name: "ops-gw-fast", Server: "gateway", Conf: fast(Conf{})}},
	}
	port := firstPort + 60
	for _, x := range list {
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		url := "http://" + addr + "/items/1"
		for i := 0; i < opsReps; i++ {
			waitPortFree(addr, 5*time.Second)
			c := b.conf(x.s, port)
			t0 := time.Now()
			p, err := b.startServer(x.s, c, fmt.Sprintf("%s-%d", x.s.Name, i))
			if err != nil {
				o.Errors = append(o.Errors, fmt.Sprintf("%s: %v", x.key, err))
				break
			}
			err = waitFirst200(url, b.authHeader(x.s), 30*time.Second, p)
			el := time.Since(t0)
			p.Stop(5 * time.Second)
			if err != nil {
				o.Errors = append(o.Errors, fmt.Sprintf("%s: %v", x.key, err))
				break
			}
			o.ColdStart[x.key] = append(o.ColdStart[x.key], ms(el))
		}
		st := stat(o.ColdStart[x.key])
		progress("  cold start %-22s p50 %6.0f ms [%0.f-%0.f]", x.key, st.Med, st.Min, st.Max)
		waitPortFree(addr, 5*time.Second)
	}

	progress("operations: admin API reload (POST /load) to a new route serving (%d times each)", opsReps)
	for _, x := range []cs{list[1], list[2]} {
		b.reloadTest(o, x.key, x.s, port)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// waitFirst200 polls url every 2 ms with fresh connections.
func waitFirst200(url, auth string, timeout time.Duration, p *Proc) error {
	cl := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		setAuth(req, auth)
		resp, err := cl.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited: %s", p.Name, p.LogTail(10))
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("no 200 from %s within %s", url, timeout)
}

// reloadTest starts the server, then POSTs a config with one more route
// (the Caddyfile adapted to JSON beforehand, as a deployment would) and
// measures until that route answers 200.
func (b *Bench) reloadTest(o *OpsResult, key string, s Scenario, port int) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	waitPortFree(addr, 5*time.Second)
	c := b.conf(s, port)
	p, err := b.startServer(s, c, s.Name+"-reload")
	if err != nil {
		o.Errors = append(o.Errors, fmt.Sprintf("reload %s: %v", key, err))
		return
	}
	defer func() { p.Stop(5 * time.Second); waitPortFree(addr, 5*time.Second) }()
	if err := waitFirst200("http://"+addr+"/items/1", b.authHeader(s), 30*time.Second, p); err != nil {
		o.Errors = append(o.Errors, fmt.Sprintf("reload %s: %v", key, err))
		return
	}
	bin := b.Gateway
	if s.Server == "caddy" {
		bin = b.Caddy
	}
	for i := 0; i < opsReps; i++ {
		c.ReloadRoute = fmt.Sprintf("reload-%d", i)
		path := filepath.Join(b.confDir, fmt.Sprintf("%s-reload-%d.Caddyfile", s.Name, i))
		if err := b.render("Caddyfile.tmpl", path, c); err != nil {
			o.Errors = append(o.Errors, err.Error())
			return
		}
		cmd := exec.Command(bin, "adapt", "--config", path, "--adapter", "caddyfile")
		cmd.Env = append(os.Environ(), b.caddyEnv()...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		js, err := cmd.Output()
		if err != nil {
			o.Errors = append(o.Errors, fmt.Sprintf("reload %s: adapt: %v: %s", key, err, oneLine(errb.String())))
			return
		}
		url := "http://" + addr + "/" + c.ReloadRoute + "/items/1"
		t0 := time.Now()
		resp, err := plainClient.Post("http://"+c.Admin+"/load", "application/json", bytes.NewReader(js))
		if err != nil {
			o.Errors = append(o.Errors, fmt.Sprintf("reload %s: POST /load: %v", key, err))
			return
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		call := time.Since(t0)
		if resp.StatusCode != 200 {
			o.Errors = append(o.Errors, fmt.Sprintf("reload %s: POST /load: %d %s", key, resp.StatusCode, oneLine(body.String())))
			return
		}
		if err := waitFirst200(url, b.authHeader(s), 10*time.Second, p); err != nil {
			o.Errors = append(o.Errors, fmt.Sprintf("reload %s: %v", key, err))
			return
		}
		o.Reload[key] = append(o.Reload[key], ms(time.Since(t0)))
		o.LoadCall[key] = append(o.LoadCall[key], ms(call))
	}
	st := stat(o.Reload[key])
	progress("  reload %-26s p50 %6.1f ms [%.1f-%.1f]", key, st.Med, st.Min, st.Max)
}

func (o *OpsResult) markdown(p func(string, ...any)) {
	p("## 5. Operations")
	p("")
	p("Cold start: from starting the process to the first `200` through it (polled every 2 ms, fresh connection each time), %d starts each. "+
		"Reload: from sending `POST /load` (a config with one more route, adapted to JSON beforehand) to that route's first `200`; the `POST /load` call alone in the last column.", opsReps)
	p("")
	p("| server | cold start p50 [min-max] | reload to new route p50 [min-max] | POST /load call p50 |")
	p("|---|---|---|---|")
	for _, k := range []string{"gateway, no duties", "gateway, apigate wrapper, no duties", "gateway, all duties", "stock Caddy", "nginx", "HAProxy", "Traefik"} {
		if len(o.ColdStart[k]) == 0 && len(o.Reload[k]) == 0 {
			continue
		}
		cs := stat(o.ColdStart[k])
		rl := stat(o.Reload[k])
		lc := stat(o.LoadCall[k])
		p("| %s | %s | %s | %s |", k, fmtStat(cs, "%.0f")+" ms", orDash(rl, "%.1f", " ms"), orDash(lc, "%.1f", " ms"))
	}
	p("")
	if len(o.ColdStart["Traefik"]) > 0 {
		p("- Traefik: no reload figure: it has no API that loads a configuration (its file and Docker providers watch for changes; the discovery part measures the Docker provider).")
	}
	for _, e := range o.Errors {
		p("- error: %s", oneLine(e))
	}
	if len(o.Errors) > 0 || len(o.ColdStart["Traefik"]) > 0 {
		p("")
	}
}

func orDash(s Stat, f, unit string) string {
	if !s.valid() {
		return "-"
	}
	return fmtStat(s, f) + unit
}

var _ = strings.TrimSpace
