// Package planname is the one rule for a quota plan's name, shared by
// the quota duty (caddyquota), the identity sources that assign plans
// (API keys' keys file, client certificate mappings) and gatewayctl. It
// imports nothing.
package planname

import "fmt"

// MaxLen bounds a plan name.
const MaxLen = 64

// Valid reports whether name can name a plan: 1 to 64 ASCII letters,
// digits, '-' and '_' (a plan's name is part of NATS keys and of the
// RateLimit fields' policy names).
func Valid(name string) bool {
	if name == "" || len(name) > MaxLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Check returns an error naming the bad plan name, or nil.
func Check(name string) error {
	if Valid(name) {
		return nil
	}
	return fmt.Errorf("invalid plan name %q: use 1 to %d letters, digits, '-' or '_'", name, MaxLen)
}
