// Command testserver is the static HTTP server that the Podman tests run in
// containers: testserver <port> <name> listens on 127.0.0.1:<port> and
// answers every request with "<name> <path>"; /ws is a WebSocket that
// answers each text message m with "<name> m".
//
// Health: GET /healthz answers 200, or 503 after POST /_sick (until POST
// /_well); `testserver check <port>` is the container's health command,
// exiting 0 when /healthz answers 200.
//
// Answers: with STATUS=<code> in its environment it answers every
// request but /healthz, /_sick, /_well and /ws with that status (a broken
// release, for the canary tests); with DELAY=<duration> it waits that long
// before answering them (a slow one).
//
// Stopping: as PID 1 it must handle SIGTERM and SIGINT itself. By default
// it exits at once. With DRAIN=<duration> in its environment it behaves as
// docs/caddydocker.md advises a service to: it keeps serving for DRAIN (the
// gateway takes it out of the pool meanwhile), then stops accepting,
// finishes the requests in flight and exits. While it drains, its answers
// carry X-Draining-Since: the time the signal arrived (RFC 3339, to the
// nanosecond), so a test can tell when a stop really began (a `podman
// stop` takes seconds to start on a loaded machine).
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/websocket"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "check" {
		os.Exit(check(os.Args[2]))
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: testserver <port> <name> | testserver check <port>")
		os.Exit(2)
	}
	port, name := os.Args[1], os.Args[2]
	var drain time.Duration
	if v := os.Getenv("DRAIN"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "DRAIN=%q: %v\n", v, err)
			os.Exit(2)
		}
		drain = d
	}
	status := http.StatusOK
	if v := os.Getenv("STATUS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 200 || n > 599 {
			fmt.Fprintf(os.Stderr, "STATUS=%q: want an HTTP status 200-599\n", v)
			os.Exit(2)
		}
		status = n
	}
	var delay time.Duration
	if v := os.Getenv("DELAY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "DELAY=%q: %v\n", v, err)
			os.Exit(2)
		}
		delay = d
	}
	var sick atomic.Bool
	var drainingSince atomic.Pointer[string]
	mux := http.NewServeMux()
	mux.Handle("/ws", websocket.Handler(func(c *websocket.Conn) {
		for {
			var m string
			if err := websocket.Message.Receive(c, &m); err != nil {
				return
			}
			if err := websocket.Message.Send(c, name+" "+m); err != nil {
				return
			}
		}
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if sick.Load() {
			http.Error(w, "sick", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /_sick", func(w http.ResponseWriter, r *http.Request) { sick.Store(true) })
	mux.HandleFunc("POST /_well", func(w http.ResponseWriter, r *http.Request) { sick.Store(false) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if delay > 0 {
			time.Sleep(delay)
		}
		w.Header().Set("X-Served-By", name)
		if since := drainingSince.Load(); since != nil {
			w.Header().Set("X-Draining-Since", *since)
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	})
	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: mux}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		if drain <= 0 {
			os.Exit(0)
		}
		since := time.Now().Format(time.RFC3339Nano)
		drainingSince.Store(&since)
		time.Sleep(drain)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		os.Exit(0)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	select {} // Shutdown is finishing the requests in flight; it exits
}

func check(port string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://127.0.0.1:" + port + "/healthz")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, resp.Status)
		return 1
	}
	return 0
}
