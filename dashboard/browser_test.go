package dashboard

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/apigate/gateway/internal/testkit/chromium"
	"github.com/apigate/gateway/internal/testkit/freeport"
	"github.com/apigate/gateway/internal/testkit/podmantest"
)

// browser is a headless Chromium tab that records console errors,
// uncaught exceptions and failed loads.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), chromium.Options(t)...)
	ctx, cancelC := chromedp.NewContext(actx)
	b := &browser{ctx: ctx}
	done := make(chan struct{})
	t.Cleanup(func() { cancelC(); cancelA(); <-done })
	// The first Run starts the browser; it must have no timeout (it would
	// stop the browser), so a watchdog cancels it instead.
	watchdog := time.AfterFunc(60*time.Second, cancelC)
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		close(done)
		t.Fatalf("starting chromium: %v", err)
	}
	watchdog.Stop()
	messages := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.record(m.String() + " (" + m.URL + ")")
			}
		}
	}()
	return b
}

func (b *browser) record(s string) {
	b.mu.Lock()
	b.errors = append(b.errors, s)
	b.mu.Unlock()
}

func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

func (b *browser) run(t *testing.T, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// waitJS polls a JavaScript expression until it returns "" (success) or
// the deadline passes; the expression returns a description otherwise.
func (b *browser) waitJS(t *testing.T, what string, timeout time.Duration, expr string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		res, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		cancel()
		if err != nil {
			last = err.Error()
		} else if res == "" {
			return
		} else {
			last = res
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not reached within %s; last: %s", what, timeout, last)
}

func (b *browser) text(t *testing.T, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
	if err != nil {
		t.Fatalf("browser: text of %s: %v", sel, err)
	}
	return s
}

// number parses a counter as the page formats it ("12", "1.5k").
func number(s string) (float64, error) {
	s = strings.TrimSpace(s)
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	}
	v, err := strconv.ParseFloat(s, 64)
	return v * mult, err
}

// TestGateway runs the gateway in process against a real Podman, and
// drives the dashboard in a real headless Chromium.
func TestGateway(t *testing.T) {
	if os.Getenv("CI") != "" {
		chromium.Path(t) // fail early, before Podman, when chromium is missing
	}
	g := startWithContainers(t)

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}

	step("admin JSON: routes, containers, counters", func(t *testing.T) {
		o := overview(t)
		if o.RoutesError != "" {
			t.Fatalf("routes error: %s", o.RoutesError)
		}
		typo, ok := findContainer(o, "typo")
		if !ok || typo.State != "rejected" || len(typo.Errors) == 0 {
			t.Fatalf("typo container: %+v (found %v)", typo, ok)
		}
		found := false
		for _, e := range typo.Errors {
			found = found || (e.Label == "gateway.router.api.path_prefx" && e.Value == "/typo" && strings.Contains(e.Reason, "unknown"))
		}
		if !found {
			t.Fatalf("typo's errors = %+v, want the unknown label path_prefx", typo.Errors)
		}
		good, ok := findContainer(o, "good")
		if !ok || good.State != "routed" || !strings.HasPrefix(good.Upstream, "127.0.0.1:") {
			t.Fatalf("good container: %+v", good)
		}
		var secure, discovered, admin bool
		for _, r := range o.Routes {
			names := dutyNames(r.Duties)
			switch {
			case r.Source == "config" && strings.Contains(strings.Join(r.Match, " "), "/secure/*"):
				secure = names == "audit jwt_auth rbac rate_limit static_response"
			case r.Source == "discovery" && strings.HasSuffix(r.ID, ":admin"):
				// the rate_limit label's handler is a quota with a plan
				// of its own (caddydocker.md)
				admin = names == "audit path_guard jwt_auth rbac quota reverse_proxy" && len(r.Upstreams) == 1 &&
					strings.HasSuffix(detailOf(r.Duties, "quota"), "_good_admin 100/minute")
			case r.Source == "discovery" && strings.HasSuffix(r.ID, ":api"):
				discovered = names == "audit path_guard reverse_proxy" && len(r.Upstreams) == 1
			}
		}
		if !secure || !discovered || !admin {
			t.Fatalf("routes: secure chain %v, discovered api %v, discovered admin %v:\n%+v", secure, discovered, admin, o.Routes)
		}
	})

	step("admin API: no page there, a pointer to the handler instead", func(t *testing.T) {
		for _, tc := range []struct {
			path, want string
		}{
			{"/gateway/", "put the gateway_dashboard handler on a site"},
			{"/gateway/nope", "no dashboard document at /gateway/nope"},
		} {
			code, body, err := get("http://" + adminAddr + tc.path)
			if err != nil || code != 404 || !strings.Contains(body, tc.want) {
				t.Errorf("GET %s = %d %v %s, want 404 with %q", tc.path, code, err, body, tc.want)
			}
		}
		code, body, err := get("http://" + adminAddr + "/gateway/events?n=5")
		if err != nil || code != 200 || !strings.Contains(body, `"enabled":true`) {
			t.Errorf("GET /gateway/events = %d %v %s", code, err, body)
		}
	})

	step("site route: jwt_auth and rbac protect the dashboard", func(t *testing.T) {
		url := "http://" + gatewayAddr + "/ops/api/overview"
		if code, _, err := get(url); err != nil || code != 401 {
			t.Fatalf("no token: %d %v, want 401", code, err)
		}
		if code, _, err := get(url, "Authorization", "Bearer "+token(t, "alice", "dev")); err != nil || code != 403 {
			t.Fatalf("without role ops: %d %v, want 403", code, err)
		}
		code, body, err := get(url, "Authorization", "Bearer "+token(t, "olga", "ops"))
		if err != nil || code != 200 || !strings.Contains(body, "path_prefx") {
			t.Fatalf("with role ops: %d %v %.200s", code, err, body)
		}
	})

	b := newBrowser(t)
	page := "http://" + pageAddr + "/"

	step("page loads and lists the routed and the rejected container", func(t *testing.T) {
		b.run(t, 30*time.Second, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#containers")))
		b.waitJS(t, "both containers on the page", 15*time.Second, `(() => {
			const rej = document.querySelector('#containers tr[data-state="rejected"]');
			const ok = document.querySelector('#containers tr[data-state="routed"]');
			if (!rej || !ok) return "rows: " + document.querySelector('#containers tbody').innerText;
			return "";
		})()`)
		rej := b.text(t, `#containers tr[data-state="rejected"]`)
		for _, want := range []string{"typo", "rejected", "gateway.router.api.path_prefx", "unknown router key"} {
			if !strings.Contains(rej, want) {
				t.Errorf("rejected row %q lacks %q", rej, want)
			}
		}
		ok := b.text(t, `#containers tr[data-state="routed"]`)
		if !strings.Contains(ok, "good") || !strings.Contains(ok, "127.0.0.1:") {
			t.Errorf("routed row %q lacks the name and upstream", ok)
		}
		routes := b.text(t, "#routes tbody")
		for _, want := range []string{"jwt_auth", "rbac", "rate_limit", "reverse_proxy", "discovery"} {
			if !strings.Contains(routes, want) {
				t.Errorf("routes table lacks %q:\n%s", want, routes)
			}
		}
		// both servers have the apigate wrapper: the gateway's (every duty)
		// is on the fast path, with its routes; the page server's
		// expected_underscore_headers keeps it on Caddy's path, and the page
		// says why
		if fp := b.text(t, `#fastpath tr[data-fastpath="on"]`); !strings.Contains(fp, "gateway") || !strings.Contains(fp, "on") ||
			!strings.Contains(fp, "route 0: plan") {
			t.Errorf("fast path row %q lacks the gateway server on, with its routes", fp)
		}
		if fp := b.text(t, `#fastpath tr[data-fastpath="off"]`); !strings.Contains(fp, "page") || !strings.Contains(fp, "off: expected_underscore_headers") {
			t.Errorf("fast path row %q lacks the page server and the reason", fp)
		}
	})

	step("a container started with a label typo shows up with its reason", func(t *testing.T) {
		port := freeport.Port(t)
		labels := map[string]string{
			"gateway.enable": "true", "gateway.port": strconv.Itoa(port),
			"gateway.router.web.path_prefix": "/late", "gateway.router.web.auth.requierd": "false",
		}
		if err := g.pod.Run("late", port, labels); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		b.waitJS(t, "the late container on the page", 15*time.Second, `(() => {
			const row = [...document.querySelectorAll('#containers tr[data-state="rejected"]')].find(r => r.dataset.name.endsWith("-late"));
			if (!row) return "not listed yet";
			return row.innerText.includes('gateway.router.web.auth.requierd="false": unknown router key') ? "" : "row: " + row.innerText;
		})()`)
		// Informational, not asserted (the machine is shared and noisy).
		t.Logf("typo visible on the page %v after podman run returned", time.Since(started).Round(10*time.Millisecond))
	})

	step("counters change after traffic", func(t *testing.T) {
		b.waitJS(t, "counters shown", 10*time.Second, `document.getElementById("stat-requests-total").textContent === "–" ? "not yet" : ""`)
		req0, err := number(b.text(t, "#stat-requests-total"))
		if err != nil {
			t.Fatal(err)
		}
		den0, err := number(b.text(t, "#stat-denials-total"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			if code, _, err := get("http://" + gatewayAddr + "/good/traffic"); err != nil || code != 200 {
				t.Fatalf("GET /good/traffic: %d %v", code, err)
			}
			if code, _, err := get("http://" + gatewayAddr + "/secure/x"); err != nil || code != 401 {
				t.Fatalf("GET /secure/x without a token: %d %v", code, err)
			}
		}
		b.waitJS(t, "request and denial totals grow", 15*time.Second, fmt.Sprintf(`(() => {
			const num = (id) => { const s = document.getElementById(id).textContent; const m = s.endsWith("k") ? 1e3 : 1; return parseFloat(s) * m; };
			const r = num("stat-requests-total"), d = num("stat-denials-total");
			return (r >= %v + 20 && d >= %v + 10) ? "" : "requests " + r + ", denials " + d;
		})()`, req0, den0))
		b.waitJS(t, "audit events listed", 10*time.Second, `document.querySelector("#events tbody").innerText.includes("/secure/x") ? "" : "no event for /secure/x"`)
		b.waitJS(t, "sparkline drawn", 10*time.Second, `document.querySelector("#spark-requests polyline") ? "" : "no polyline"`)
	})

	step("a canary release: a line per side with share, error rate and P99", func(t *testing.T) {
		for _, v := range []struct{ name, version string }{{"rel-v1", "v1"}, {"rel-v2", "v2"}} {
			port := freeport.Port(t)
			labels := map[string]string{
				"gateway.enable": "true", "gateway.name": "rel", "gateway.port": strconv.Itoa(port),
				"gateway.version": v.version, "gateway.router.api.path_prefix": "/rel",
				"gateway.router.api.auth.required": "false",
			}
			if v.version == "v2" {
				labels["gateway.canary.weight"] = "50"
				labels["gateway.canary.sticky"] = "none"
			}
			if err := g.pod.Run(v.name, port, labels); err != nil {
				t.Fatal(err)
			}
		}
		podmantest.Eventually(t, "both versions answer", 30*time.Second, func() string {
			seen := map[string]bool{}
			for range 20 {
				if code, body, err := get("http://" + gatewayAddr + "/rel/x"); err == nil && code == 200 {
					seen[strings.Fields(body)[0]] = true
				}
			}
			if !seen["rel-v1"] || !seen["rel-v2"] {
				return fmt.Sprintf("seen %v", seen)
			}
			return ""
		})
		b.waitJS(t, "the release's two lines", 15*time.Second, `(() => {
			const rows = [...document.querySelectorAll('#canaries tr[data-service="rel"]')];
			if (rows.length !== 2) return "rows: " + document.querySelector('#canaries tbody').innerText;
			const [st, ca] = rows.map(r => r.innerText);
			if (!st.includes("stable · v1") || !st.includes("running") || !st.includes("50%")) return "stable line: " + st;
			if (!ca.includes("canary · v2") || !/\d+\.\d% *\t/.test(ca) || !ca.includes(" ms")) return "canary line: " + ca;
			return "";
		})()`)
	})

	step("search filters the tables, from the keyboard", func(t *testing.T) {
		b.run(t, 10*time.Second, chromedp.KeyEvent("/"))
		b.waitJS(t, "/ focuses the search box", 5*time.Second, `document.activeElement && document.activeElement.id === "search" ? "" : "focus on " + (document.activeElement && document.activeElement.id)`)
		b.run(t, 10*time.Second, chromedp.KeyEvent("path_prefx"))
		b.waitJS(t, "only the typo container stays", 5*time.Second, `(() => {
			const rows = [...document.querySelectorAll("#containers tbody tr")];
			const shown = rows.filter(r => !r.classList.contains("hidden-by-filter")).map(r => r.dataset.state);
			return JSON.stringify(shown) === '["rejected"]' ? "" : "shown: " + JSON.stringify(shown) + " for " + JSON.stringify(document.getElementById("search").value);
		})()`)
		b.run(t, 10*time.Second, chromedp.KeyEvent("\x1b")) // Escape clears the filter
		b.waitJS(t, "Escape clears the filter", 5*time.Second, `document.querySelectorAll(".hidden-by-filter").length === 0 && document.getElementById("search").value === "" ? "" : "still filtered"`)
		b.run(t, 10*time.Second, chromedp.KeyEvent("good"))
	})

	if path := os.Getenv("DASHBOARD_SCREENSHOT"); path != "" {
		step("screenshot", func(t *testing.T) {
			b.run(t, 10*time.Second, chromedp.KeyEvent("\x1b"), chromedp.Blur(chromedp.CSS("#search")))
			// A few seconds of uneven traffic, so that the sparklines have a shape.
			for i := 0; i < 12; i++ {
				for j := 0; j < (i%4+1)*6; j++ {
					_, _, _ = get("http://" + gatewayAddr + "/good/orders/" + strconv.Itoa(j))
					if j%3 == 0 {
						_, _, _ = get("http://" + gatewayAddr + "/secure/report")
					}
				}
				time.Sleep(400 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
			defer cancel()
			if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 1200)); err != nil {
				t.Fatal(err)
			}
			png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()) // the top of the page, as PNG
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, png, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("screenshot written to %s", path)
		})
	}

	step("site route in the browser, with a bearer token", func(t *testing.T) {
		hdr := network.Headers{"Authorization": "Bearer " + token(t, "olga", "ops")}
		b.run(t, 30*time.Second,
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
					return err
				}
				_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: hdr})
				return err
			}),
			chromedp.Navigate("http://"+gatewayAddr+"/ops"), // redirected to /ops/
			chromedp.WaitVisible(chromedp.CSS(`#containers tr[data-state="rejected"]`)))
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		loc, err := chromedp.Run(ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		if loc != "http://"+gatewayAddr+"/ops/" {
			t.Errorf("location %q, want the /ops/ page", loc)
		}
	})

	step("no console errors", func(t *testing.T) {
		if errs := b.consoleErrors(); len(errs) > 0 {
			t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
		}
	})
}

// detailOf is the detail of the duty named name ("" without one).
func detailOf(ds []Duty, name string) string {
	for _, d := range ds {
		if d.Name == name {
			return d.Detail
		}
	}
	return ""
}

func dutyNames(ds []Duty) string {
	var n []string
	for _, d := range ds {
		n = append(n, d.Name)
	}
	return strings.Join(n, " ")
}
