// Package atomicfile replaces a file's content atomically: a reader sees
// the old content or the new, never a mix or a cut, and a crash leaves one
// of the two. The one helper for files that the gateway and gatewayctl
// rewrite in place (the docker app's state file, API keys files).
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Write replaces path's content with data: it writes a temporary file in
// the same directory, syncs it, gives it path's mode (and owner, see
// keepOwner) or perm when path does not exist yet, renames it over path
// and syncs the directory. The directory must exist. On an error path is
// unchanged and the temporary file removed.
func Write(path string, data []byte, perm fs.FileMode) error {
	mode := perm
	old, err := os.Stat(path)
	switch {
	case err == nil:
		if !old.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		mode = old.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if old != nil {
		if err := keepOwner(f, old, path); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	// the rename itself survives a crash once the directory is synced
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
