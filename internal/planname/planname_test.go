package planname

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for name, want := range map[string]bool{
		"free": true, "pro-2026": true, "TIER_1": true,
		"": false, "a b": false, "pro.1": false, "pro/1": false, "ü": false,
		strings.Repeat("a", 64): true, strings.Repeat("a", 65): false,
	} {
		if Valid(name) != want {
			t.Errorf("Valid(%q) = %v, want %v", name, !want, want)
		}
		if (Check(name) == nil) != want {
			t.Errorf("Check(%q) disagrees with Valid", name)
		}
	}
}
