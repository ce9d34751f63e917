package caddyh1

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestResetError: the client reports a connection the upstream closed or
// reset before any byte of a response as a *ResetError, and nothing else
// as one (a response cut short, a timeout, a malformed head).
func TestResetError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handle    handleFunc
		method    string
		body      string
		opts      Options
		wantReset bool
		bodyRead  bool
	}{
		{name: "closed before answering", method: "GET", wantReset: true,
			handle: func(c net.Conn, _ *http.Request, _ []byte, _ int) bool { return false }},
		{name: "reset before answering", method: "HEAD", wantReset: true,
			handle: func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
				_ = c.(*net.TCPConn).SetLinger(0)
				return false
			}},
		{name: "closed before answering a POST with a body", method: "POST", body: "order", wantReset: true, bodyRead: true,
			handle: func(c net.Conn, _ *http.Request, _ []byte, _ int) bool { return false }},
		{name: "part of a head, then closed", method: "GET",
			handle: func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
				reply(c, "HTTP/1.1 200 OK\r\nContent-")
				return false
			}},
		{name: "a 100 Continue, then closed", method: "GET",
			handle: func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
				reply(c, "HTTP/1.1 100 Continue\r\n\r\n")
				return false
			}},
		{name: "malformed head", method: "GET",
			handle: func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
				reply(c, "HTTP/1.1 200 OK\nContent-Length: 0\n\n")
				return false
			}},
		{name: "timeout", method: "GET", opts: Options{ResponseHeaderTimeout: 50 * time.Millisecond},
			handle: func(c net.Conn, _ *http.Request, _ []byte, _ int) bool {
				time.Sleep(300 * time.Millisecond)
				return false
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUpstream(t, tc.handle)
			c := newTestClient(t, tc.opts)
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			_, _, err := get(t, c, u, tc.method, "/", body)
			if err == nil {
				t.Fatal("no error")
			}
			var re *ResetError
			if errors.As(err, &re) != tc.wantReset {
				t.Fatalf("error %v (%T): reset %v, want %v", err, err, !tc.wantReset, tc.wantReset)
			}
			if re != nil && re.BodyRead != tc.bodyRead {
				t.Errorf("BodyRead %v, want %v", re.BodyRead, tc.bodyRead)
			}
		})
	}
}

// TestRetryOnAnother is the decision table, with the errors the client
// returns.
func TestRetryOnAnother(t *testing.T) {
	dial := &DialError{Err: errors.New("connect: connection refused")}
	reset := &ResetError{Err: io.EOF}
	resetBody := &ResetError{Err: io.EOF, BodyRead: true}
	other := errors.New("malformed response")
	for _, tc := range []struct {
		method string
		err    error
		resets int
		want   bool
	}{
		{"GET", dial, 0, true},
		{"POST", dial, 0, true},
		{"DELETE", dial, 3, true},
		{"GET", reset, 0, true},
		{"HEAD", reset, 0, true},
		{"OPTIONS", reset, 0, true},
		{"GET", reset, 1, false}, // once per request
		{"GET", resetBody, 0, false},
		{"POST", reset, 0, false},
		{"PUT", reset, 0, false},
		{"PATCH", reset, 0, false},
		{"DELETE", reset, 0, false},
		{"TRACE", reset, 0, false},
		{"GET", other, 0, false},
		{"GET", errResponseHeaderTimeout, 0, false},
		{"GET", nil, 0, false},
	} {
		if got := RetryOnAnother(tc.method, tc.err, tc.resets); got != tc.want {
			t.Errorf("RetryOnAnother(%s, %v, %d) = %v, want %v", tc.method, tc.err, tc.resets, got, tc.want)
		}
	}
}
