// Command benchtool is bench/run's engine: it runs the side-by-side
// benchmark (see bench/README.md) and the small services it needs.
//
//	benchtool run [flags]              the benchmark; writes bench/results/<date>[-<label>].md, .png, .json and the index README.md
//	benchtool index <dir>              write <dir>/README.md, the index of the reports in it, again
//	benchtool authsvc <addr> <keydir>  auth service for nginx auth_request / Caddy forward_auth
//	benchtool permsvc <addr>           permission service (allows everything)
//	benchtool auditsink <addr>         audit webhook receiver
//	benchtool openloop <addr> <path> <rate> <conns> <duration> [header]   fixed-rate load, JSON result
//	benchtool h3load <url> <conns> <streams> <duration> [header]   closed-loop HTTP/3 load, JSON result
//	benchtool idleconns <addr> <path> <n> [header]   hold n idle keep-alive connections until stdin closes
//	benchtool slowloris <addr> <n> <interval>        hold n connections sending a head a line per interval, until stdin closes
//	benchtool flaky <addr> <ctl>       the failing upstream of the circuit-breaking part
//	benchtool chart <results.json> <out.png>   redraw a chart
//	benchtool report <results.json>    write the report's Markdown again (beside the JSON)
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "authsvc":
		need(4)
		var k *Keys
		if k, err = loadOrCreateKeys(os.Args[3]); err == nil {
			err = serveAuth(os.Args[2], k)
		}
	case "permsvc":
		need(3)
		err = servePermission(os.Args[2])
	case "auditsink":
		need(3)
		err = serveAuditReceiver(os.Args[2])
	case "report":
		need(3)
		var r *Report
		if r, err = loadReport(os.Args[2]); err == nil {
			err = os.WriteFile(strings.TrimSuffix(os.Args[2], ".json")+".md", []byte(r.markdown(filepath.Base(strings.TrimSuffix(os.Args[2], ".json")+".png"))), 0o644)
		}
	case "index":
		need(3)
		err = writeIndex(os.Args[2])
	case "chart":
		need(4)
		var r *Report
		if r, err = loadReport(os.Args[2]); err == nil {
			err = drawChart(r, os.Args[3])
		}
	case "run":
		raiseFDLimit()
		err = cmdRun(os.Args[2:])
	case "openloop":
		err = cmdOpenLoop(os.Args[2:])
	case "h3load":
		err = cmdH3Load(os.Args[2:])
	case "idleconns":
		err = cmdIdleConns(os.Args[2:])
	case "slowloris":
		err = cmdSlowloris(os.Args[2:])
	case "flaky":
		need(4)
		err = serveFlaky(os.Args[2], os.Args[3])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtool:", err)
		os.Exit(1)
	}
}

func need(n int) {
	if len(os.Args) != n {
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: benchtool run [flags] | authsvc <addr> <keydir> | permsvc <addr> | auditsink <addr> | openloop ... | h3load <url> <conns> <streams> <duration> [header] | idleconns ... | slowloris <addr> <n> <interval> | flaky <addr> <ctl> | chart <json> <png>")
	os.Exit(2)
}

var progressStart = time.Now()

// progress prints a timestamped line to stderr.
func progress(format string, args ...any) {
	el := time.Since(progressStart).Round(time.Second)
	fmt.Fprintf(os.Stderr, "[bench %6s] %s\n", el, fmt.Sprintf(format, args...))
}

func cmdRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	b := &Bench{}
	fs.StringVar(&b.Root, "root", ".", "repository root")
	fs.StringVar(&b.Gateway, "gateway", "bin/caddy", "the gateway binary")
	fs.StringVar(&b.Caddy, "caddy", "bench/work/caddy-stock", "stock Caddy binary")
	fs.StringVar(&b.CDP, "cdp", "bench/work/caddy-cdp", "Caddy with caddy-docker-proxy")
	fs.StringVar(&b.CtrServer, "ctrserver", "bench/work/ctrserver", "static container server binary")
	fs.StringVar(&b.Traefik, "traefik", "bench/work/traefik", "Traefik binary (bench/build-traefik)")
	fs.StringVar(&b.FastProxy, "fastproxy", "bench/work/fastproxy", "the fasthttp reference proxy binary")
	fs.IntVar(&b.Rounds, "rounds", 5, "interleaved rounds")
	dur := fs.Duration("duration", 5*time.Second, "wrk duration per connection level")
	fs.DurationVar(&b.Warmup, "warmup", 2*time.Second, "wrk warm-up before each scenario's runs")
	fs.BoolVar(&b.Quick, "quick", false, "quick mode (results file gets a -quick suffix)")
	fs.BoolVar(&b.All, "all", false, "run the opt-in scenarios too (longer than the 45-minute default)")
	fs.StringVar(&b.Only, "only", "", "comma-separated scenario names and parts (default: all); naming a part runs only the named parts")
	skip := fs.String("skip", "", "comma-separated parts to skip: "+strings.Join(parts, ", "))
	containers := fs.Int("containers", 10, "containers in the discovery test")
	note := fs.String("note", "", "a note for the report (e.g. machine load)")
	label := fs.String("label", "", "the report's short name after the date: bench/results/<date>-<label>.md (lower-case letters, digits, '-')")
	fs.Parse(args)
	var err error
	if b.Label, err = cleanLabel(*label); err != nil {
		return err
	}
	b.Dur = *dur
	return b.Run(*containers, *skip, *note)
}
