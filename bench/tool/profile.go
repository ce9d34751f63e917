package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Profile is the top of a CPU profile taken for a missed target.
type Profile struct {
	Scenario string `json:"scenario"`
	Kind     string `json:"kind"` // cpu | heap
	Top      string `json:"top,omitempty"`
	Err      string `json:"error,omitempty"`
}

const maxProfiles = 5

// profiles takes a CPU profile of each gateway scenario whose target was
// missed: the scenario runs again under its load (wrk at 300
// connections; h2load for the TLS rows) while the gateway's admin
// endpoint records a profile.
func (b *Bench) profiles() {
	seen := map[string]bool{}
	var names []string
	for _, t := range b.report.Targets {
		if t.Status != "missed" || t.Scenario == "" || seen[t.Scenario] {
			continue
		}
		if s, ok := b.report.scenario(t.Scenario); ok && s.Server == "gateway" {
			seen[t.Scenario] = true
			names = append(names, t.Scenario)
		}
	}
	// The fast path's rows first: they are the gateway's own engine, and
	// the limit would otherwise leave them out behind Caddy's path's.
	sort.SliceStable(names, func(i, j int) bool {
		return strings.HasPrefix(names[i], "gw-fast") && !strings.HasPrefix(names[j], "gw-fast")
	})
	limit := maxProfiles
	if b.Quick {
		limit = 2
	}
	if len(names) > limit {
		names = names[:limit]
	}
	for _, n := range names {
		s, _ := b.report.scenario(n)
		progress("profile: %s (target missed), 8 s CPU profile at 300 connections", n)
		b.report.Profiles = append(b.report.Profiles, b.profile(s, "cpu"))
	}
	for _, t := range b.report.Targets {
		if t.Status == "missed" && t.Kind == "rssmax" {
			if s, ok := b.report.scenario(t.Scenario); ok {
				progress("profile: %s (memory target missed), heap profile at 300 connections", s.Name)
				b.report.Profiles = append(b.report.Profiles, b.profile(s, "heap"))
			}
		}
	}
}

func (b *Bench) profile(s Scenario, kind string) Profile {
	pr := Profile{Scenario: s.Name, Kind: kind}
	port := firstPort + 70
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	url := rowURL(s, addr)
	waitPortFree(addr, 5*time.Second)
	c := b.conf(s, port)
	p, err := b.startServer(s, c, s.Name+"-profile")
	if err != nil {
		pr.Err = err.Error()
		return pr
	}
	defer func() { p.Stop(5 * time.Second); waitPortFree(addr, 5*time.Second) }()
	if err := b.waitRow(s, url, 30*time.Second, p); err != nil {
		pr.Err = err.Error()
		return pr
	}
	wrkDone := make(chan error, 1)
	go func() {
		_, err := b.load(s, url, s.Levels()[0], 11*time.Second, 0)
		wrkDone <- err
	}()
	cl := &http.Client{Timeout: 30 * time.Second}
	purl := "http://" + gwAdmin + "/debug/pprof/profile?seconds=8"
	views := [][]string{{"-top", "-nodecount=15"}, {"-top", "-cum", "-nodecount=30"}}
	if kind == "heap" {
		time.Sleep(8 * time.Second) // near the end of the run, at the peak
		purl = "http://" + gwAdmin + "/debug/pprof/heap"
		views = [][]string{{"-top", "-sample_index=inuse_space", "-nodecount=20"}}
	} else {
		time.Sleep(1500 * time.Millisecond)
	}
	resp, err := cl.Get(purl)
	if err != nil {
		<-wrkDone
		pr.Err = err.Error()
		return pr
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	<-wrkDone
	if resp.StatusCode != 200 {
		pr.Err = fmt.Sprintf("profile endpoint: %d %s", resp.StatusCode, oneLine(string(data)))
		return pr
	}
	path := filepath.Join(b.Work, "profiles", s.Name+"-"+kind+".pb.gz")
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		pr.Err = err.Error()
		return pr
	}
	var parts []string
	for _, args := range views {
		out, err := exec.Command("go", append(append([]string{"tool", "pprof"}, args...), b.Gateway, path)...).CombinedOutput()
		if err != nil {
			pr.Err = fmt.Sprintf("go tool pprof: %v: %s", err, oneLine(string(out)))
			return pr
		}
		parts = append(parts, "$ go tool pprof "+strings.Join(args, " ")+"\n"+strings.TrimSpace(string(out)))
	}
	pr.Top = strings.Join(parts, "\n\n")
	return pr
}
