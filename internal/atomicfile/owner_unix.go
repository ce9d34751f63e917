//go:build unix

package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// keepOwner gives the new file f the owner and group of the file it
// replaces, so that a file of the gateway's user, rewritten by root,
// stays readable by the gateway. When the process may not (not root, and
// the file is someone else's), it is an error rather than a file that
// changes hands.
func keepOwner(f *os.File, old fs.FileInfo, path string) error {
	want, ok := old.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	have, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || (have.Uid == want.Uid && have.Gid == want.Gid) {
		return nil
	}
	if err := f.Chown(int(want.Uid), int(want.Gid)); err != nil {
		return fmt.Errorf("%s belongs to uid %d gid %d, and the replacement cannot keep that owner (%v): run as that user or root", path, want.Uid, want.Gid, err)
	}
	return nil
}
