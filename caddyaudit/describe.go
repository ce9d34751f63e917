package caddyaudit

import "encoding/json"

// DescribeConfig summarizes an audit handler's JSON config for the
// dashboard: its route name.
func DescribeConfig(raw json.RawMessage) string {
	var h Handler
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	return h.Route
}
