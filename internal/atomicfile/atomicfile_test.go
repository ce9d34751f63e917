package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.json")

	t.Run("a new file gets perm", func(t *testing.T) {
		if err := Write(path, []byte("one\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, "one\n", 0o600)
	})
	t.Run("an existing file keeps its mode", func(t *testing.T) {
		if err := os.Chmod(path, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := Write(path, []byte("two\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		checkFile(t, path, "two\n", 0o640)
	})
	t.Run("no temporary file is left", func(t *testing.T) {
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Fatalf("directory holds %d entries, want only keys.json", len(entries))
		}
	})
	t.Run("errors leave the file as it was", func(t *testing.T) {
		before, _ := os.ReadFile(path)
		if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil {
			t.Error("a missing directory: no error")
		}
		if err := Write(dir, []byte("x"), 0o600); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a directory as the file: %v", err)
		}
		after, _ := os.ReadFile(path)
		if string(before) != string(after) {
			t.Error("the file changed")
		}
	})
}

func checkFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != content {
		t.Fatalf("content %q, %v; want %q", b, err, content)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != mode {
		t.Fatalf("mode %v, %v; want %v", fi.Mode().Perm(), err, mode)
	}
}
