package natsstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/caddyserver/certmagic"

	"github.com/apigate/gateway/internal/atomicfile"
)

// disk is the local copy's files: one file per storage key, at the key's
// path under dir, as Caddy's own file storage lays them out (an operator
// can read a certificate there with the usual tools).
type disk struct{ dir string }

// errUnsafeKey is returned for keys that cannot be a path under the local
// copy's directory ("." or ".." segments, from a bucket written by
// something else): they are served from NATS only.
var errUnsafeKey = errors.New("key has a '.' or '..' segment: not kept in the local copy")

// file returns the file of the normalized key p.
func (d *disk) file(p string) (string, error) {
	segs := splitPath(p)
	if len(segs) == 0 {
		return d.dir, nil
	}
	for _, s := range segs {
		if s == "." || s == ".." {
			return "", errUnsafeKey
		}
	}
	return filepath.Join(append([]string{d.dir}, segs...)...), nil
}

// load reads p; a missing file gives an error wrapping fs.ErrNotExist.
func (d *disk) load(p string) ([]byte, error) {
	f, err := d.file(p)
	if errors.Is(err, errUnsafeKey) {
		return nil, notExist(p)
	}
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(f)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && (errors.Is(err, fs.ErrNotExist) || isDirErr(f)) {
			return nil, notExist(p)
		}
		return nil, fmt.Errorf("local copy: %w", err)
	}
	return b, nil
}

func isDirErr(f string) bool {
	fi, err := os.Stat(f)
	return err == nil && fi.IsDir()
}

// hash is the SHA-256 of p's local value, "" when there is none.
func (d *disk) hash(p string) string {
	b, err := d.load(p)
	if err != nil {
		return ""
	}
	return valueHash(b)
}

// valueHash identifies a value in the journal: the base a queued write
// expects NATS to still hold.
func valueHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// put writes p. durable writes are synced (and the directory) before it
// returns: a queued write lives only here until NATS takes it. A copy of
// what NATS already holds is rewritten without syncing.
func (d *disk) put(p string, v []byte, durable bool) error {
	f, err := d.file(p)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	if durable {
		return atomicfile.Write(f, v, 0o600)
	}
	if old, err := os.ReadFile(f); err == nil && bytes.Equal(old, v) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(f), tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(v); err != nil {
		tmp.Close()
		return fmt.Errorf("local copy: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("local copy: %w", err)
	}
	return os.Rename(tmp.Name(), f)
}

// tmpPrefix starts the names of files being written (internal/atomicfile
// names them ".<name>.tmp-*"): below skips both.
const tmpPrefix = ".tmp-"

// del removes p and everything below it.
func (d *disk) del(p string) error {
	f, err := d.file(p)
	if errors.Is(err, errUnsafeKey) {
		return nil
	}
	if err != nil {
		return err
	}
	if f == d.dir {
		return fmt.Errorf("local copy: refusing to delete the whole copy")
	}
	return os.RemoveAll(f)
}

// delFile removes p if it is a file (a key NATS no longer has; a local
// directory of that name holds other keys and stays).
func (d *disk) delFile(p string) {
	f, err := d.file(p)
	if err != nil || f == d.dir {
		return
	}
	if fi, err := os.Lstat(f); err == nil && fi.Mode().IsRegular() {
		_ = os.Remove(f)
	}
}

// below returns the keys of every file strictly below p, sorted.
func (d *disk) below(ctx context.Context, p string) ([]string, error) {
	root, err := d.file(p)
	if errors.Is(err, errUnsafeKey) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	err = filepath.WalkDir(root, func(f string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if f == root || !e.Type().IsRegular() {
			return nil
		}
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) || strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(d.dir, f)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("local copy: %w", err)
	}
	sort.Strings(out)
	return out, nil
}

// stat describes p as the storage's Stat does.
func (d *disk) stat(p string) (certmagic.KeyInfo, error) {
	f, err := d.file(p)
	if errors.Is(err, errUnsafeKey) {
		return certmagic.KeyInfo{}, notExist(p)
	}
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	fi, err := os.Stat(f)
	if errors.Is(err, fs.ErrNotExist) {
		return certmagic.KeyInfo{}, notExist(p)
	}
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("local copy: %w", err)
	}
	return certmagic.KeyInfo{Key: p, Modified: fi.ModTime(), Size: fi.Size(), IsTerminal: !fi.IsDir()}, nil
}
