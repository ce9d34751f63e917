package caddyopenapi

import (
	"encoding/json"
	"path/filepath"
	"strings"
)

// DescribeConfig summarizes an openapi handler's JSON config for the
// dashboard's routes: the document's file name and the modes, e.g.
// "orders.yaml, request dry_run, response off, undeclared reject,
// enforce_security" (the defaults filled in as Provision fills them).
func DescribeConfig(raw json.RawMessage) string {
	var h OpenAPI
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	parts := []string{
		filepath.Base(h.Spec),
		"request " + or(h.Request, ModeEnforce),
		"response " + or(h.Response, ModeOff),
		"undeclared " + or(h.Undeclared, UndeclaredPass),
	}
	if h.EnforceSecurity {
		parts = append(parts, "enforce_security")
	}
	return strings.Join(parts, ", ")
}
