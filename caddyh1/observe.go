package caddyh1

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// AnswerObserver learns how an upstream answered one attempt of a
// request: the response status (0 when there is none), the error of an
// attempt that got no response (a failure to connect, a reset, a timeout,
// the client gone), and the time from sending the request to the
// response head (the latency Caddy's {http.reverse_proxy.upstream.latency}
// reports). It is called on the request's goroutine, once per attempt
// that the transport sends, before the response body is read; it must
// not block.
type AnswerObserver interface {
	ObserveAnswer(status int, err error, latency time.Duration)
}

// ObserverVar is the request variable holding the AnswerObserver of the
// request's next attempt (Observe sets it; a caller that holds the
// variables table already may set it there).
const ObserverVar = "gateway.h1_observer"

// Observe asks the h1 transport to report the answer of r's next attempt
// to o (nil: to nobody). It is how a selection policy or an upstream
// source learns the outcome of the upstream it chose: every request path
// of the gateway sends through Transport.RoundTripTo (Caddy's
// reverse_proxy through RoundTrip, the fast path directly), and both
// hand it a request whose context holds the variables that the
// selection policy saw, so one call here observes both paths. The
// observer stays set for later attempts of the request until it is
// replaced.
func Observe(r *http.Request, o AnswerObserver) {
	caddyhttp.SetVar(r.Context(), ObserverVar, o)
}

// observerOf returns the request's observer, if any.
func observerOf(r *http.Request) AnswerObserver {
	o, _ := caddyhttp.GetVar(r.Context(), ObserverVar).(AnswerObserver)
	return o
}

// observe reports one attempt's outcome to o (nil: nothing).
func observe(o AnswerObserver, res *http.Response, err error, start time.Time) {
	if o == nil {
		return
	}
	status := 0
	if res != nil {
		status = res.StatusCode
	}
	o.ObserveAnswer(status, err, time.Since(start))
}
