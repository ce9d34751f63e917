// Package urls holds the gateway's checks of configured URLs and the one way
// it shows a URL in logs, errors and the dashboard.
package urls

import (
	"fmt"
	"net/url"
	"strings"
)

// CheckHTTP returns an error naming field when raw is not an absolute http://
// or https:// URL with a host.
func CheckHTTP(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid %s %q: must be an absolute http:// or https:// URL", field, Redact(raw))
	}
	return nil
}

// Redact drops what may hold a credential from a URL: user info, query and
// fragment. A string that is not a URL keeps what follows its last "@".
func Redact(s string) string {
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		host, _, _ := strings.Cut(rest, "/")
		if at := strings.LastIndex(host, "@"); at >= 0 {
			s = s[:i+3] + rest[at+1:]
		}
	} else if at := strings.LastIndex(s, "@"); at >= 0 {
		s = s[at+1:]
	}
	if q := strings.IndexAny(s, "?#"); q >= 0 {
		s = s[:q]
	}
	return s
}
