package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// An open-loop load generator: requests are scheduled at a fixed rate,
// whatever the server's answers do, and each latency is measured from the
// time the request was scheduled, not from when a connection was free to
// send it. A closed-loop tool (wrk) sends the next request only when an
// answer came back, so a server that stalls is sent fewer requests during
// the stall and its slow answers are under-counted ("coordinated
// omission"). Debian packages no wrk2, so the bench has its own.

// OpenLoopResult is one fixed-rate run.
type OpenLoopResult struct {
	Rate     float64 `json:"rate"`     // scheduled requests per second
	Achieved float64 `json:"achieved"` // answered per second
	Sent     int64   `json:"sent"`
	Errors   int64   `json:"errors"`  // connection errors and non-2xx answers
	Late     int64   `json:"late_ms"` // requests sent more than 1 ms after their scheduled time
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	P999ms   float64 `json:"p999_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// openLoop sends GET path to addr at rate requests per second over conns
// kept-alive connections for d.
func openLoop(addr, path, header string, rate float64, conns int, d time.Duration) (OpenLoopResult, error) {
	res := OpenLoopResult{Rate: rate}
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\n")
	if header != "" {
		req = append(req, header+"\r\n"...)
	}
	req = append(req, "\r\n"...)
	total := int64(rate * d.Seconds())
	interval := float64(time.Second) / rate
	sched := make(chan int64, 1<<16)
	start := time.Now()

	// The pacer releases every request whose time has come, with that time.
	go func() {
		defer close(sched)
		for i := int64(0); i < total; {
			due := time.Duration(float64(i) * interval)
			if now := time.Since(start); due > now {
				time.Sleep(min(due-now, 200*time.Microsecond))
				continue
			}
			sched <- int64(due) // blocks when every connection is busy: the latency still counts from due
			i++
		}
	}()

	type workerResult struct {
		lat          []int64
		errors, late int64
		sent         int64
		firstErr     error
	}
	results := make([]workerResult, conns)
	var wg sync.WaitGroup
	for w := 0; w < conns; w++ {
		wg.Add(1)
		go func(wr *workerResult) {
			defer wg.Done()
			var c net.Conn
			var br *bufio.Reader
			for due := range sched {
				sentAt := time.Since(start)
				if sentAt-time.Duration(due) > time.Millisecond {
					wr.late++
				}
				wr.sent++
				if c == nil {
					var err error
					if c, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
						wr.errors++
						if wr.firstErr == nil {
							wr.firstErr = err
						}
						c = nil
						continue
					}
					br = bufio.NewReaderSize(c, 16<<10)
				}
				c.SetDeadline(time.Now().Add(10 * time.Second))
				ok, err := roundTripRaw(c, br, req)
				if err != nil {
					wr.errors++
					if wr.firstErr == nil {
						wr.firstErr = err
					}
					c.Close()
					c = nil
					continue
				}
				if !ok {
					wr.errors++
				}
				wr.lat = append(wr.lat, int64(time.Since(start))-due)
			}
			if c != nil {
				c.Close()
			}
		}(&results[w])
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []int64
	var firstErr error
	for _, wr := range results {
		all = append(all, wr.lat...)
		res.Errors += wr.errors
		res.Late += wr.late
		res.Sent += wr.sent
		if firstErr == nil {
			firstErr = wr.firstErr
		}
	}
	if len(all) == 0 {
		if firstErr != nil {
			return res, fmt.Errorf("no answers: %v", firstErr)
		}
		return res, fmt.Errorf("no answers")
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	q := func(p float64) float64 {
		i := int(p * float64(len(all)-1))
		return float64(all[i]) / 1e6
	}
	res.P50ms, res.P99ms, res.P999ms, res.MaxMs = q(0.50), q(0.99), q(0.999), float64(all[len(all)-1])/1e6
	res.Achieved = float64(len(all)) / elapsed.Seconds()
	return res, nil
}

// roundTripRaw writes req and reads one response (Content-Length or
// chunked); ok reports a 2xx status.
func roundTripRaw(c net.Conn, br *bufio.Reader, req []byte) (ok bool, err error) {
	if _, err := c.Write(req); err != nil {
		return false, err
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return false, fmt.Errorf("bad status line %q", line)
	}
	ok = line[9] == '2'
	length, chunked := int64(-1), false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return false, err
		}
		if len(h) <= 2 {
			break
		}
		k, v, _ := strings.Cut(string(h), ":")
		switch strings.ToLower(k) {
		case "content-length":
			length, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		case "transfer-encoding":
			chunked = strings.Contains(strings.ToLower(v), "chunked")
		}
	}
	switch {
	case chunked:
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return false, err
			}
			n, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(l, ";", 2)[0]), 16, 64)
			if err != nil {
				return false, fmt.Errorf("bad chunk size %q", l)
			}
			if _, err := br.Discard(int(n) + 2); err != nil {
				return false, err
			}
			if n == 0 {
				return ok, nil // (no trailers from these servers)
			}
		}
	case length >= 0:
		_, err = br.Discard(int(length))
		return ok, err
	}
	return false, fmt.Errorf("response without a length")
}

// cmdOpenLoop is `benchtool openloop <addr> <path> <rate> <conns> <duration> [header]`;
// it prints an OpenLoopResult as JSON.
func cmdOpenLoop(args []string) error {
	if len(args) < 5 {
		return fmt.Errorf("usage: openloop <addr> <path> <rate> <conns> <duration> [header]")
	}
	rate, err := strconv.ParseFloat(args[2], 64)
	if err != nil || rate <= 0 {
		return fmt.Errorf("bad rate %q", args[2])
	}
	conns, err := strconv.Atoi(args[3])
	if err != nil || conns <= 0 {
		return fmt.Errorf("bad conns %q", args[3])
	}
	d, err := time.ParseDuration(args[4])
	if err != nil {
		return err
	}
	header := ""
	if len(args) > 5 {
		header = args[5]
	}
	r, err := openLoop(args[0], args[1], header, rate, conns, d)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// runOpenLoop runs the generator as a process pinned to the load core,
// beside the backend, as wrk is.
func (b *Bench) runOpenLoop(addr, path, header string, rate float64, conns int, d time.Duration) (OpenLoopResult, error) {
	args := []string{"openloop", addr, path, strconv.FormatFloat(rate, 'f', 0, 64), strconv.Itoa(conns), d.String()}
	if header != "" {
		args = append(args, header)
	}
	var r OpenLoopResult
	err := b.runLoadTool(&r, args...)
	return r, err
}

// runLoadTool runs a load subcommand of this tool (openloop, h3load) on
// core 0 with GOMAXPROCS=1 and decodes its JSON result into out.
func (b *Bench) runLoadTool(out any, args ...string) error {
	cmd := exec.Command("taskset", append([]string{"-c", coreLoad, b.Tool}, args...)...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	var stdout, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", args[0], err, strings.TrimSpace(errb.String()))
	}
	if err := json.NewDecoder(io.LimitReader(&stdout, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: %v", args[0], err)
	}
	return nil
}
