package caddypathguard

import (
	"encoding/json"
	"strings"
)

// DescribeConfig summarizes a path_guard handler's JSON config for the
// dashboard: its mode and options, e.g. "normalize, keep_encoded_slash".
func DescribeConfig(raw json.RawMessage) string {
	var h PathGuard
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	parts := []string{ModeReject}
	if h.Mode != "" {
		parts[0] = h.Mode
	}
	if h.KeepEncodedSlash {
		parts = append(parts, "keep_encoded_slash")
	}
	if h.RejectParams {
		parts = append(parts, "reject_params")
	}
	return strings.Join(parts, ", ")
}
