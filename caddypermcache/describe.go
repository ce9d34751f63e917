package caddypermcache

import (
	"encoding/json"

	"github.com/apigate/gateway/internal/urls"
)

// DescribeConfig summarizes a permission handler's JSON config for the
// dashboard: the service's URL, without what may hold a credential.
func DescribeConfig(raw json.RawMessage) string {
	var h Handler
	if json.Unmarshal(raw, &h) != nil || h.URL == "" {
		return ""
	}
	return urls.Redact(h.URL)
}
