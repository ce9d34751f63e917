package caddyopenapi

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestProblemsDocumented: docs/errors.md, the one page of the gateway's
// refusals, lists every kind of openapi refusal with its type, status and
// title.
func TestProblemsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/errors.md")
	if err != nil {
		t.Fatal(err)
	}
	for v, p := range problems {
		if p.typ == "" {
			continue
		}
		row := fmt.Sprintf("| `%s` | %d | %s |", p.typ, verdictStatus[v], p.title)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/errors.md has no row %q", row)
		}
	}
}
