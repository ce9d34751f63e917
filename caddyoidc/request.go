package caddyoidc

import (
	"net"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/publicsuffix"
)

// SafeMethod reports whether a method does not change state (RFC 9110
// 9.2.1): GET, HEAD, OPTIONS, TRACE.
func SafeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// SameSite reports whether a request comes from the site it is sent to,
// as a browser says it: Sec-Fetch-Site same-origin, same-site or none (the
// user typed the address); without Sec-Fetch-Site, an Origin on the same
// site (scheme and registrable domain) as the request. A request with
// neither header, or with Origin "null", is not same-site: a
// state-changing request that carries a session cookie must prove where
// it comes from (cross-site request forgery).
func SameSite(r *http.Request, https bool) bool {
	if v := r.Header.Get("Sec-Fetch-Site"); v != "" {
		return v == "same-origin" || v == "same-site" || v == "none"
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	scheme := "http"
	if https {
		scheme = "https"
	}
	if u.Scheme != scheme {
		return false
	}
	return site(hostOnly(u.Host)) == site(hostOnly(r.Host))
}

// hostOnly drops the port and lowers the case.
func hostOnly(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// site is a host's registrable domain (eTLD+1, the public suffix list);
// an IP address or a name without one (localhost) is its own site.
func site(host string) string {
	if host == "" || net.ParseIP(strings.Trim(host, "[]")) != nil {
		return host
	}
	s, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil {
		return host
	}
	return s
}

// Navigation reports whether a request is a browser's top-level
// navigation, the one kind of request unauthenticated sends to the
// provider: GET or HEAD, Accept names text/html, and Sec-Fetch-Mode (when
// the browser sends it) is navigate. Anything else (fetch, XHR, an API
// client) gets 401, never an HTML redirect.
func Navigation(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if m := r.Header.Get("Sec-Fetch-Mode"); m != "" && m != "navigate" {
		return false
	}
	for _, a := range r.Header.Values("Accept") {
		if strings.Contains(strings.ToLower(a), "text/html") {
			return true
		}
	}
	return false
}
