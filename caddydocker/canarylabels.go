package caddydocker

import (
	"encoding/json"
	"math"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// CanarySpec is what the gateway.canary.* labels of a canary version's
// containers ask for (docs/caddydocker.md, "Canary releases").
type CanarySpec struct {
	// Weight is the share of the service's requests, in percent, that the
	// canary starts with (gateway.canary.weight).
	Weight int `json:"weight"`
	// Sticky is how a client keeps its version: "subject" (by the
	// authenticated subject, else by cookie), "cookie" or "none".
	Sticky string `json:"sticky"`
	// Header (canonical form) sends requests that carry it to the canary
	// whatever the weight; with HeaderValue, only those with that value.
	Header      string `json:"header,omitempty"`
	HeaderValue string `json:"header_value,omitempty"`
	// Step and Interval: the weight rises by Step every Interval while
	// the canary is healthy, up to 100 (both or neither).
	Step     int           `json:"step,omitempty"`
	Interval time.Duration `json:"interval,omitempty"`
	// MinRequests is how many answers of the canary the window must hold
	// before they are judged.
	MinRequests int `json:"min_requests"`
	// MaxErrorRate is the highest share of failed answers (upstream 5xx
	// and connection failures), in percent, that the canary may have.
	MaxErrorRate float64 `json:"max_error_rate"`
	// MaxP99, when set, is the highest 99th percentile latency allowed.
	MaxP99 time.Duration `json:"max_p99,omitempty"`
	// Window is the length of the sliding window of answers.
	Window time.Duration `json:"window"`
}

// MarshalJSON writes the durations as Go durations ("30s").
func (s CanarySpec) MarshalJSON() ([]byte, error) {
	type plain CanarySpec
	dur := func(d time.Duration) string {
		if d == 0 {
			return ""
		}
		return d.String()
	}
	return json.Marshal(struct {
		plain
		Interval string `json:"interval,omitempty"`
		MaxP99   string `json:"max_p99,omitempty"`
		Window   string `json:"window"`
	}{plain(s), dur(s.Interval), dur(s.MaxP99), dur(s.Window)})
}

// Defaults of the canary labels.
const (
	DefaultCanaryMinRequests  = 100
	DefaultCanaryMaxErrorRate = 5.0
	DefaultCanaryWindow       = time.Minute
	// CanaryStickySubject and the others are gateway.canary.sticky's values.
	CanaryStickySubject = "subject"
	CanaryStickyCookie  = "cookie"
	CanaryStickyNone    = "none"
)

// canaryKeys are the keys after gateway.canary.
var canaryKeys = []string{"weight", "sticky", "header", "step", "interval", "min_requests", "max_error_rate", "max_p99", "window"}

// versionLabels reads gateway.version and the gateway.canary.* labels.
func (p *labelParser) versionLabels(svc *Service) {
	const canaryPrefix = LabelPrefix + "canary."
	version, hasVersion := p.get("version")
	if hasVersion {
		if !validVersion(version) {
			p.bad(LabelPrefix+"version", version, "must be 1-128 characters of letters, digits, '.', '_', '-' or '+'")
		} else {
			svc.Version = version
		}
	}
	kv := map[string]string{}
	for key, value := range p.c.Labels {
		if !strings.HasPrefix(key, canaryPrefix) {
			continue
		}
		sub := key[len(canaryPrefix):]
		known := false
		for _, k := range canaryKeys {
			known = known || k == sub
		}
		if !known {
			p.bad(key, value, "unknown canary key %q (known: %s)", sub, strings.Join(canaryKeys, ", "))
			continue
		}
		kv[sub] = strings.TrimSpace(value)
	}
	if len(kv) == 0 {
		return
	}
	label := func(sub string) string { return canaryPrefix + sub }
	if !hasVersion {
		p.bad(LabelPrefix+"version", "", "missing: gateway.canary.* labels make one version of a service its canary; set gateway.version")
	}
	spec := &CanarySpec{Sticky: CanaryStickySubject, MinRequests: DefaultCanaryMinRequests,
		MaxErrorRate: DefaultCanaryMaxErrorRate, Window: DefaultCanaryWindow}
	intIn := func(sub string, lo, hi int, dst *int) {
		v, ok := kv[sub]
		if !ok {
			return
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			p.bad(label(sub), v, "must be a whole number from %d to %d", lo, hi)
			return
		}
		*dst = n
	}
	durIn := func(sub string, lo, hi time.Duration, dst *time.Duration) {
		v, ok := kv[sub]
		if !ok {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < lo || d > hi {
			p.bad(label(sub), v, "must be a duration from %s to %s, e.g. 30s", lo, hi)
			return
		}
		*dst = d
	}
	if _, ok := kv["weight"]; !ok {
		p.bad(label("weight"), "", "missing: the canary version's containers need gateway.canary.weight (0-100), the share of requests it starts with")
	}
	intIn("weight", 0, 100, &spec.Weight)
	if v, ok := kv["sticky"]; ok {
		switch v {
		case CanaryStickySubject, CanaryStickyCookie, CanaryStickyNone:
			spec.Sticky = v
		default:
			p.bad(label("sticky"), v, "must be subject, cookie or none")
		}
	}
	if v, ok := kv["header"]; ok {
		name, value, hasValue := strings.Cut(v, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			p.bad(label("header"), v, "must be a header name, or Name=value")
		case hasValue && (value == "" || !httpguts.ValidHeaderFieldValue(value)):
			p.bad(label("header"), v, "the value after '=' must be a non-empty header value")
		default:
			spec.Header, spec.HeaderValue = textproto.CanonicalMIMEHeaderKey(name), value
		}
	}
	intIn("step", 1, 100, &spec.Step)
	durIn("interval", time.Second, 24*time.Hour, &spec.Interval)
	_, hasStep := kv["step"]
	_, hasInterval := kv["interval"]
	if hasStep != hasInterval {
		missing := "interval"
		if !hasStep {
			missing = "step"
		}
		p.bad(label(missing), "", "missing: gateway.canary.step and gateway.canary.interval go together (raise the weight by step every interval)")
	}
	intIn("min_requests", 1, 1_000_000_000, &spec.MinRequests)
	if v, ok := kv["max_error_rate"]; ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(v, "%")), 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 100 {
			p.bad(label("max_error_rate"), v, "must be a percentage from 0 to 100, e.g. 5%%")
		} else {
			spec.MaxErrorRate = f
		}
	}
	durIn("max_p99", time.Millisecond, time.Hour, &spec.MaxP99)
	durIn("window", time.Second, 24*time.Hour, &spec.Window)
	svc.Canary = spec
}

func validVersion(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' || r == '+') {
			return false
		}
	}
	return true
}
