package caddyh1

import (
	"errors"
	"net/http"
)

// RetryOnAnother is the gateway's one decision of whether a request that
// failed on one upstream may be sent to another upstream. Every path that
// proxies requests calls it, so that they retry alike: Transport.RoundTrip
// (Caddy's reverse_proxy with `transport h1`, which discovered routes use)
// and any other request path of the gateway. The caller counts, per
// request, the moves it made after a reset (resetsBefore); moves after dial
// errors are bounded by the caller's retry limit.
//
//   - A dial error (*DialError): yes, whatever the method: nothing was sent.
//   - The upstream closed or reset the connection before sending any byte
//     of a response (*ResetError), as a replica does that exits, or closes
//     its keep-alive connections, as the request arrives: yes for GET, HEAD
//     and OPTIONS whose body was not read, once per request (as Envoy's
//     `retry_on: reset` with one retry). The upstream may have acted on the
//     request, so other methods are not sent again.
//   - Anything else (a timeout, a malformed response, a response cut
//     short, the client gone): no.
func RetryOnAnother(method string, err error, resetsBefore int) bool {
	var de *DialError
	if errors.As(err, &de) {
		return true
	}
	var re *ResetError
	if errors.As(err, &re) {
		switch method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return !re.BodyRead && resetsBefore == 0
		}
	}
	return false
}
