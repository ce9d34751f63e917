package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// HTTP/3 stays on Caddy's path (issue 36), and its cost is measured with
// this closed-loop HTTP/3 client: Debian's h2load (nghttp2 1.52) is built
// without QUIC, and no other packaged client speaks HTTP/3. It is quic-go's
// client (the QUIC stack Caddy's own server uses), conns QUIC connections
// with streams requests in flight on each, for a duration; like h2load it
// runs one thread (GOMAXPROCS=1) pinned to core 0. It is heavier than
// h2load, so it may not fill the proxy's core: the row's cpu_us_per_req
// is its cost, its req/s the client's limit.

const protoH3 = "h3" // HTTP/3 over QUIC (TLS 1.3): benchtool h3load

// h3Result is one h3load run, printed as JSON.
type h3Result struct {
	Requests int64   `json:"requests"`
	Non2xx   int64   `json:"non_2xx"`
	Errors   int64   `json:"errors"`
	Seconds  float64 `json:"seconds"`
	Proto    string  `json:"proto"` // the answers' protocol ("HTTP/3.0")
	FirstErr string  `json:"first_error,omitempty"`
	// FirstBad is the first answer outside 2xx/3xx: its status and body
	FirstBad string `json:"first_bad,omitempty"`
}

// cmdH3Load: benchtool h3load <url> <conns> <streams> <duration> [header]
func cmdH3Load(args []string) error {
	if len(args) < 4 || len(args) > 5 {
		return errors.New("usage: benchtool h3load <url> <conns> <streams> <duration> [header]")
	}
	conns, err1 := strconv.Atoi(args[1])
	streams, err2 := strconv.Atoi(args[2])
	d, err3 := time.ParseDuration(args[3])
	if err := errors.Join(err1, err2, err3); err != nil || conns < 1 || streams < 1 {
		return fmt.Errorf("h3load: bad arguments %q: %v", args, err)
	}
	var name, value string
	if len(args) == 5 {
		var ok bool
		if name, value, ok = strings.Cut(args[4], ":"); !ok {
			return fmt.Errorf("h3load: header %q is not name: value", args[4])
		}
		value = strings.TrimSpace(value)
	}
	r, err := h3Load(args[0], conns, streams, d, name, value)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// h3Load runs the load: one transport per connection (a transport keeps
// one QUIC connection per host), streams goroutines on each.
func h3Load(url string, conns, streams int, d time.Duration, hname, hvalue string) (h3Result, error) {
	var res h3Result
	var reqs, non2xx, errs atomic.Int64
	var proto atomic.Value
	var firstErr, firstBad atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var trs []*http3.Transport
	start := time.Now()
	for range conns {
		tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}}
		trs = append(trs, tr)
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		for range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					if err != nil {
						firstErr.CompareAndSwap(nil, err.Error())
						errs.Add(1)
						return
					}
					if hname != "" {
						req.Header.Set(hname, hvalue)
					}
					resp, err := cl.Do(req)
					if err != nil {
						if ctx.Err() == nil { // (not the end of the run)
							firstErr.CompareAndSwap(nil, err.Error())
							errs.Add(1)
						}
						continue
					}
					if ctx.Err() != nil {
						// an answer after the end of the run is to a request the
						// run cancelled (the gateway may answer it 504): as
						// h2load, count only what completed within the run
						resp.Body.Close()
						return
					}
					var body []byte
					if resp.StatusCode < 200 || resp.StatusCode >= 400 {
						body, err = io.ReadAll(io.LimitReader(resp.Body, 200))
						firstBad.CompareAndSwap(nil, fmt.Sprintf("%d %s", resp.StatusCode, body))
					}
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
					}
					resp.Body.Close()
					if err != nil && ctx.Err() != nil {
						continue // cut by the end of the run
					}
					proto.CompareAndSwap(nil, resp.Proto)
					reqs.Add(1)
					switch {
					case err != nil:
						firstErr.CompareAndSwap(nil, err.Error())
						errs.Add(1)
					case resp.StatusCode < 200 || resp.StatusCode >= 400:
						non2xx.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	for _, tr := range trs {
		tr.Close()
	}
	res.Requests, res.Non2xx, res.Errors = reqs.Load(), non2xx.Load(), errs.Load()
	if p, ok := proto.Load().(string); ok {
		res.Proto = p
	}
	if e, ok := firstErr.Load().(string); ok {
		res.FirstErr = e
	}
	if e, ok := firstBad.Load().(string); ok {
		res.FirstBad = e
	}
	return res, nil
}

// runH3Load runs benchtool h3load pinned to core 0 with GOMAXPROCS=1 and
// reads its result as the bench's. A run with no answer over HTTP/3 is an
// error (the server did not serve QUIC).
func (b *Bench) runH3Load(j H2Job) (WrkResult, error) {
	args := []string{"h3load", j.URL, strconv.Itoa(j.Conns), strconv.Itoa(max(j.Streams, 1)), j.Duration.String()}
	if j.Header != "" {
		args = append(args, j.Header)
	}
	var r h3Result
	if err := b.runLoadTool(&r, args...); err != nil {
		return WrkResult{}, err
	}
	if r.FirstBad != "" {
		progress("  h3load %s: %d answers outside 2xx/3xx, the first: %s", j.URL, r.Non2xx, oneLine(r.FirstBad))
	}
	return r.result()
}

// result is the bench's view of an h3load run.
func (r h3Result) result() (WrkResult, error) {
	if r.Requests == 0 || r.Proto != "HTTP/3.0" {
		return WrkResult{}, fmt.Errorf("h3load: no answer over HTTP/3 (%d requests, protocol %q, first error: %s)", r.Requests, r.Proto, r.FirstErr)
	}
	w := WrkResult{Requests: r.Requests, Non2xx: r.Non2xx, Errors: r.Errors}
	if r.Seconds > 0 {
		w.RPS = float64(r.Requests) / r.Seconds
	}
	return w, nil
}
