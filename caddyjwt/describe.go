package caddyjwt

import (
	"encoding/json"
	"strings"
)

// DescribeConfig summarizes a jwt_auth handler's JSON config for the
// dashboard: "optional", the audiences. It never shows a key or a secret.
func DescribeConfig(raw json.RawMessage) string {
	var j JWTAuth
	if json.Unmarshal(raw, &j) != nil {
		return ""
	}
	var parts []string
	if j.Optional {
		parts = append(parts, "optional")
	}
	if len(j.Audiences) > 0 {
		parts = append(parts, "aud "+strings.Join(j.Audiences, ","))
	}
	return strings.Join(parts, ", ")
}
