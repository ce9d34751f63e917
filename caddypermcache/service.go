package caddypermcache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CheckRequest is the JSON body POSTed to the permission service.
type CheckRequest struct {
	// Subject is the identity's subject (`sub`); empty for an anonymous request.
	Subject string `json:"subject"`
	// Roles are the identity's roles; never null.
	Roles []string `json:"roles"`
	// Method is the request method.
	Method string `json:"method"`
	// Host is the request host, without port.
	Host string `json:"host"`
	// Path is the request path (as the handler sees it).
	Path string `json:"path"`
	// Route is the configured route name; may be empty.
	Route string `json:"route"`
}

// Answer is the permission service's decision and what it said about caching.
type Answer struct {
	// Allow is the decision.
	Allow bool
	// MaxAge is the Cache-Control max-age, when HasMaxAge.
	MaxAge time.Duration
	// HasMaxAge is true when the answer carried a usable max-age.
	HasMaxAge bool
	// NoStore is true for `no-store` or `no-cache`: do not cache.
	NoStore bool
}

// DefaultMaxAnswerBytes caps how much of the service's answer is read.
const DefaultMaxAnswerBytes = 64 << 10

// maxAgeCap is the largest max-age honoured (RFC 9111 section 1.2.2).
const maxAgeCap = 2147483648 * time.Second

// ParseAnswer interprets the service's answer:
//   - 200 allows and 403 denies; any other status is an error.
//   - A JSON object body (Content-Type application/json, or a body that
//     starts with '{') may carry {"allow": bool}, which decides for a 200;
//     a 403 that says {"allow": true} is contradictory and an error. A body
//     that claims to be JSON but is not valid JSON is an error. Other bodies
//     ("OK", "Forbidden") are ignored.
//   - Cache-Control max-age=N overrides the TTL, no-store and no-cache (or
//     max-age=0) forbid caching.
func ParseAnswer(status int, cacheControl, contentType string, body []byte) (Answer, error) {
	var a Answer
	switch status {
	case http.StatusOK:
		a.Allow = true
	case http.StatusForbidden:
		a.Allow = false
	default:
		return Answer{}, fmt.Errorf("permission service answered status %d", status)
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && (trimmed[0] == '{' || isJSONType(contentType)) {
		var v struct {
			Allow json.RawMessage `json:"allow"`
		}
		if err := json.Unmarshal(trimmed, &v); err != nil {
			return Answer{}, fmt.Errorf("permission service answer is not a JSON object: %v", err)
		}
		if len(v.Allow) > 0 {
			if string(v.Allow) == "null" {
				return Answer{}, errors.New("permission service answer: \"allow\" is null, not a boolean")
			}
			var allow bool
			if err := json.Unmarshal(v.Allow, &allow); err != nil {
				return Answer{}, fmt.Errorf("permission service answer: \"allow\" is %s, not a boolean", jsonKind(v.Allow))
			}
			if status == http.StatusForbidden && allow {
				return Answer{}, errors.New("permission service answer is contradictory: status 403 with \"allow\": true")
			}
			a.Allow = allow
		}
	}
	a.MaxAge, a.HasMaxAge, a.NoStore = ParseCacheControl(cacheControl)
	return a, nil
}

func isJSONType(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func jsonKind(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// ParseCacheControl reads max-age, no-store and no-cache from a
// Cache-Control header value. Directive names are case-insensitive; an
// invalid max-age counts as max-age=0 (stale at once, as RFC 9111 asks).
func ParseCacheControl(v string) (maxAge time.Duration, hasMaxAge, noStore bool) {
	for v != "" {
		var d string
		if i := strings.IndexByte(v, ','); i >= 0 {
			d, v = v[:i], v[i+1:]
		} else {
			d, v = v, ""
		}
		d = strings.TrimSpace(d)
		name, val, _ := strings.Cut(d, "=")
		name = strings.TrimSpace(name)
		switch {
		case strings.EqualFold(name, "no-store"), strings.EqualFold(name, "no-cache"):
			noStore = true
		case strings.EqualFold(name, "max-age") && !hasMaxAge:
			hasMaxAge = true
			val = strings.Trim(strings.TrimSpace(val), `"`)
			n, err := strconv.ParseUint(val, 10, 64)
			switch {
			case err != nil && errors.Is(err, strconv.ErrRange):
				maxAge = maxAgeCap
			case err != nil:
				maxAge = 0
			case n > uint64(maxAgeCap/time.Second):
				maxAge = maxAgeCap
			default:
				maxAge = time.Duration(n) * time.Second
			}
		}
	}
	return maxAge, hasMaxAge, noStore
}

// Client calls a permission service.
type Client struct {
	// URL receives the POSTs.
	URL string
	// HTTP is the client (keepalive transport, see NewTransport).
	HTTP *http.Client
	// MaxAnswerBytes caps the answer body; DefaultMaxAnswerBytes when 0.
	MaxAnswerBytes int64
}

// NewTransport returns the keepalive transport used for permission calls.
func NewTransport() *http.Transport {
	return &http.Transport{
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 5 * time.Second,
	}
}

// Check asks the service about req. The context bounds the call.
func (c *Client) Check(ctx context.Context, req CheckRequest) (Answer, error) {
	if req.Roles == nil {
		req.Roles = []string{}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Answer{}, fmt.Errorf("encoding permission request: %v", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return Answer{}, fmt.Errorf("building permission request: %v", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	resp, err := c.HTTP.Do(hreq)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return Answer{}, errors.New("permission service timed out")
		}
		return Answer{}, fmt.Errorf("permission service unreachable: %v", err)
	}
	defer resp.Body.Close()
	limit := c.MaxAnswerBytes
	if limit <= 0 {
		limit = DefaultMaxAnswerBytes
	}
	ans, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return Answer{}, errors.New("permission service timed out")
		}
		return Answer{}, fmt.Errorf("reading permission answer: %v", err)
	}
	if int64(len(ans)) > limit {
		return Answer{}, fmt.Errorf("permission service answer is larger than %d bytes", limit)
	}
	return ParseAnswer(resp.StatusCode, resp.Header.Get("Cache-Control"), resp.Header.Get("Content-Type"), ans)
}
