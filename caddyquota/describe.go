package caddyquota

import (
	"encoding/json"
	"strings"
)

// DescribeConfig summarizes a quota handler's JSON config for the
// dashboard: a plan of its own with its limits ("docker_gateway_shop_api
// 100/30s": a route's rate limit, a rate_limit label's), "shared by the
// fleet" when its own counts are (Counts.Fleet), "plan <name>" for a plan
// of the quota global option, "the consumer's plan" otherwise; and
// "dry_run".
func DescribeConfig(raw json.RawMessage) string {
	var h Handler
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	var parts []string
	switch {
	case len(h.Limits) > 0:
		s := h.Plan
		for _, v := range h.Limits {
			if l, err := ParseLimit(v); err == nil {
				v = l.String()
			}
			s += " " + v
		}
		parts = append(parts, strings.TrimSpace(s))
		if h.Counts != nil && h.Counts.Fleet != nil {
			parts = append(parts, "shared by the fleet")
		}
	case h.Plan != "":
		parts = append(parts, "plan "+h.Plan)
	default:
		parts = append(parts, "the consumer's plan")
	}
	if h.DryRun {
		parts = append(parts, "dry_run")
	}
	return strings.Join(parts, ", ")
}
