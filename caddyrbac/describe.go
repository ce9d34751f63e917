package caddyrbac

import (
	"encoding/json"
	"strings"
)

// DescribeConfig summarizes an rbac handler's JSON config for the
// dashboard: its rules, e.g. "any admin,editor; scope any orders:read".
func DescribeConfig(raw json.RawMessage) string {
	var h RBAC
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	var parts []string
	for _, rules := range []struct {
		prefix string
		list   []RuleConfig
	}{{"", h.Require}, {"scope ", h.RequireScope}} {
		for _, r := range rules.list {
			if len(r.Any) > 0 {
				parts = append(parts, rules.prefix+"any "+strings.Join(r.Any, ","))
			}
			if len(r.All) > 0 {
				parts = append(parts, rules.prefix+"all "+strings.Join(r.All, ","))
			}
		}
	}
	return strings.Join(parts, "; ")
}
