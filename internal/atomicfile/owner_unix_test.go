//go:build unix

package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteKeepsOwner: a file of another user (the gateway's), rewritten
// by root (gatewayctl), keeps its owner and group.
func TestWriteKeepsOwner(t *testing.T) {
	if os.Getuid() != 0 {
		// only root can give a file away, and so test that it comes back
		return
	}
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte("one\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, "two\n", 0o640)
	if uid, gid := owner(t, path); uid != 4242 || gid != 4343 {
		t.Fatalf("owner %d:%d after the write, want 4242:4343", uid, gid)
	}
}

func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}
