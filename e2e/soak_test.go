package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoak runs every duty at 300 connections for SOAK_DURATION (default
// 10m) and records requests, errors and the gateway's resident memory every
// 5 s into soak.csv and soak.svg (SOAK_OUT, default bench/results). It runs
// only with GATEWAY_SOAK=1 (`make soak`); CI skips it (.ci/allowed-skips).
func TestSoak(t *testing.T) {
	if os.Getenv("GATEWAY_SOAK") != "1" {
		t.Skip("soak runs only with GATEWAY_SOAK=1 (make soak)")
	}
	dur := 10 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_DURATION: %v", err)
		}
		dur = d
	}
	outDir := os.Getenv("SOAK_OUT")
	if outDir == "" {
		outDir = "../bench/results"
	}
	s := newStack(t)
	// a limit far above what the soak sends: the duty runs, never rejects.
	// (caddy-ratelimit keeps a ring of `events` timestamps per key, so the
	// limit is set per second rather than as a huge per-minute count.)
	s.rateEvents, s.rateWindow = 10000, "1s"
	s.start()

	users := make([]string, 50)
	for i := range users {
		users[i] = s.token(fmt.Sprintf("soak-user-%d", i), []string{"reader"}, 2*dur+time.Hour, nil)
	}
	var reqs, errs atomic.Int64
	var kinds sync.Map // error kind -> *atomic.Int64
	count := func(kind string) {
		v, _ := kinds.LoadOrStore(kind, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 300, MaxConnsPerHost: 300}, Timeout: 10 * time.Second}
	for c := 0; c < 300; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/soak/%d", gwBase, n%10), nil)
				req.Header.Set("Authorization", "Bearer "+users[(c+n)%len(users)])
				resp, err := client.Do(req)
				reqs.Add(1)
				if err != nil {
					errs.Add(1)
					count(err.Error())
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs.Add(1)
					count(strconv.Itoa(resp.StatusCode))
				}
			}
		}(c)
	}
	type sample struct {
		at         time.Duration
		reqs, errs int64
		rssMB      float64
	}
	var samples []sample
	start := time.Now()
	tick := time.NewTicker(5 * time.Second)
	for time.Since(start) < dur {
		<-tick.C
		smp := sample{at: time.Since(start), reqs: reqs.Load(), errs: errs.Load(), rssMB: rssMB(s.cmd.Process.Pid)}
		samples = append(samples, smp)
		t.Logf("soak %6.0fs: %d requests, %d errors, RSS %.1f MB", smp.at.Seconds(), smp.reqs, smp.errs, smp.rssMB)
	}
	tick.Stop()
	close(stop)
	wg.Wait()

	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var csv strings.Builder
	csv.WriteString("seconds,requests,errors,rss_mb\n")
	for _, smp := range samples {
		fmt.Fprintf(&csv, "%.0f,%d,%d,%.1f\n", smp.at.Seconds(), smp.reqs, smp.errs, smp.rssMB)
	}
	if err := os.WriteFile(filepath.Join(outDir, "soak.csv"), []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	pts := make([][2]float64, len(samples))
	rate := make([][2]float64, len(samples))
	var prev sample
	for i, smp := range samples {
		pts[i] = [2]float64{smp.at.Seconds(), smp.rssMB}
		rate[i] = [2]float64{smp.at.Seconds(), float64(smp.reqs-prev.reqs) / (smp.at - prev.at).Seconds()}
		prev = smp
	}
	svg := lineChart("Soak: all duties, 300 connections", "seconds",
		series{"resident memory (MB)", "#1f77b4", pts}, series{"requests/s", "#ff7f0e", rate})
	if err := os.WriteFile(filepath.Join(outDir, "soak.svg"), []byte(svg), 0o644); err != nil {
		t.Fatal(err)
	}
	last := samples[len(samples)-1]
	t.Logf("soak done: %d requests, %d errors in %s; RSS %.1f MB at the end", last.reqs, last.errs, dur, last.rssMB)
	kinds.Range(func(k, v any) bool {
		t.Logf("errors %q: %d", k, v.(*atomic.Int64).Load())
		return true
	})
	if last.errs != 0 {
		t.Errorf("%d errors during the soak", last.errs)
	}
	// flat after warm-up: the last third's peak stays within 20% of the
	// second third's peak
	if n := len(samples); n >= 6 {
		peak := func(ss []sample) float64 {
			m := 0.0
			for _, x := range ss {
				m = max(m, x.rssMB)
			}
			return m
		}
		mid, end := peak(samples[n/3:2*n/3]), peak(samples[2*n/3:])
		if end > mid*1.2 {
			t.Errorf("resident memory still growing after warm-up: %.1f MB -> %.1f MB", mid, end)
		}
	}
}

// rssMB reads a process's resident set size.
func rssMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

type series struct {
	name, color string
	pts         [][2]float64
}

// lineChart draws series on a shared x axis, each scaled to its own maximum
// (the legend gives the maxima), as a small standalone SVG.
func lineChart(title, xlabel string, ss ...series) string {
	const w, h, pad = 800.0, 360.0, 50.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="20" font-size="15">%s</text>`, pad, title)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`, pad, h-pad, w-pad, h-pad)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`, pad, pad, pad, h-pad)
	xmax := 1.0
	for _, s := range ss {
		for _, p := range s.pts {
			xmax = max(xmax, p[0])
		}
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s (0 to %.0f)</text>`, w/2-60, h-15, xlabel, xmax)
	for i, s := range ss {
		ymax := 0.0
		for _, p := range s.pts {
			ymax = max(ymax, p[1])
		}
		if ymax == 0 {
			ymax = 1
		}
		var pts strings.Builder
		for _, p := range s.pts {
			x := pad + p[0]/xmax*(w-2*pad)
			y := h - pad - p[1]/ymax*(h-2*pad)*0.95
			fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, s.color, pts.String())
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="12" height="12" fill="%s"/><text x="%.0f" y="%.0f">%s (max %.1f)</text>`,
			w-pad-260, pad+float64(i)*18-10, s.color, w-pad-242, pad+float64(i)*18, s.name, ymax)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
