// Package internal holds the rules of docs/architecture.md's import graph
// that concern internal/ itself (it has no code of its own, only this
// test): production helpers sit at the bottom of the graph, and test kits
// are imported by tests only.
package internal

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/apigate/gateway/"

// TestInternalImportsNothingAbove: no non-test file of a package under
// internal/ (internal/testkit/ excepted: test kits start Caddy with the
// gateway's modules) imports a package of this module outside internal/,
// nor a test kit. An arrow back up the graph would make a helper depend on
// a module that depends on helpers (docs/architecture.md, "Who may import
// whom"). Test files may import upward: they are not part of the helper.
func TestInternalImportsNothingAbove(t *testing.T) {
	checked := eachImport(t, ".", func(file string, line int, p string) {
		if !strings.HasPrefix(p, module) {
			return
		}
		rel := strings.TrimPrefix(p, module)
		if !strings.HasPrefix(rel, "internal/") || strings.HasPrefix(rel, "internal/testkit/") {
			t.Errorf("internal/%s (line %d) imports %s: a helper under internal/ may import only other helpers under internal/ (see docs/architecture.md)",
				file, line, p)
		}
	})
	if checked < 10 {
		t.Fatalf("checked only %d files under internal/: is the test running from internal/?", checked)
	}
}

// TestOnlyTestsImportTestKits: no non-test file outside internal/testkit/
// imports a test kit (docs/architecture.md, "Who may import whom": test
// kits start Caddy with the gateway's modules, so a module importing one
// would import the modules above it, and ship test code in the binary).
// The kits' own commands (fleetcaddy, testsummary, testop) live under
// internal/testkit/ and may import each other.
func TestOnlyTestsImportTestKits(t *testing.T) {
	checked := eachImport(t, "..", func(file string, line int, p string) {
		if strings.HasPrefix(p, module+"internal/testkit/") {
			t.Errorf("%s (line %d) imports %s: only tests import test kits (see docs/architecture.md)",
				file, line, p)
		}
	})
	if checked < 100 {
		t.Fatalf("checked only %d files of the module: is the test running from internal/?", checked)
	}
}

// eachImport calls check with each import of each non-test Go file below
// root (its path relative to root, the import's line and path), and
// returns how many files it read. It skips internal/testkit/ (relative to
// the module: the kits may import anything), testdata, hidden folders and
// folders with a go.mod of their own (bench).
func eachImport(t *testing.T, root string, check func(file string, line int, p string)) int {
	t.Helper()
	fset := token.NewFileSet()
	checked := 0
	testkit, err := filepath.Abs("testkit")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if abs, err := filepath.Abs(path); err == nil && abs == testkit {
				return filepath.SkipDir
			}
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			check(filepath.ToSlash(rel), fset.Position(imp.Pos()).Line, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return checked
}
