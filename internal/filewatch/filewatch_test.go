package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReload: the value is read again when one of its files changes (at
// the first call an interval after the last check), a change that does
// not load keeps the last good value and is reported once, a file that
// goes away likewise, and one that comes back is read again.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	main, inc := filepath.Join(dir, "main"), filepath.Join(dir, "inc")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(main, "a")
	write(inc, "1")
	// the value is main's text plus inc's when main names it ("a+")
	load := func() (string, []string, error) {
		m, err := os.ReadFile(main)
		if err != nil {
			return "", nil, err
		}
		s := string(m)
		if strings.HasPrefix(s, "bad") {
			return "", nil, errors.New("bad content")
		}
		files := []string{main}
		if strings.HasSuffix(s, "+") {
			i, err := os.ReadFile(inc)
			if err != nil {
				return "", nil, err
			}
			s += string(i)
			files = append(files, inc)
		}
		return s, files, nil
	}
	now := time.Unix(1000, 0)
	w, err := Open(load, time.Second, now)
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	reloads := 0
	w.OnError = func(err error) { errs = append(errs, err) }
	w.OnReload = func(string) { reloads++ }
	tick := func() string { now = now.Add(time.Second); return w.Current(now) }

	if got := w.Current(now); got != "a" {
		t.Fatalf("%q", got)
	}
	write(main, "bb")
	if got := w.Current(now.Add(time.Millisecond)); got != "a" {
		t.Errorf("read again before the interval: %q", got)
	}
	if got := tick(); got != "bb" {
		t.Errorf("after a change: %q", got)
	}
	write(main, "cc+") // now names inc
	if got := tick(); got != "cc+1" {
		t.Errorf("%q", got)
	}
	write(inc, "22") // a change of the other file
	if got := tick(); got != "cc+22" {
		t.Errorf("after a change of a file the value names: %q", got)
	}
	write(main, "bad!")
	tick()
	if got := tick(); got != "cc+22" || len(errs) != 1 {
		t.Errorf("after a bad change: %q, %d errors (want the last good value, one error)", got, len(errs))
	}
	os.Remove(main)
	tick()
	if got := tick(); got != "cc+22" || len(errs) != 2 {
		t.Errorf("after the file went: %q, %d errors", got, len(errs))
	}
	write(main, "d")
	if got := tick(); got != "d" || len(errs) != 2 {
		t.Errorf("after the file came back: %q, %d errors", got, len(errs))
	}
	if reloads != 4 {
		t.Errorf("%d reloads, want 4", reloads)
	}
}

// TestLatest: Latest reads the files again once an interval has passed
// since the last check (each time), and not before.
func TestLatest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		want     string
	}{
		{"after the interval", time.Millisecond, "bb"},
		{"before the interval", time.Hour, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(f, []byte("a"), 0o644); err != nil {
				t.Fatal(err)
			}
			load := func() (string, []string, error) {
				b, err := os.ReadFile(f)
				return string(b), []string{f}, err
			}
			w, err := Open(load, tc.interval, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte("bb"), 0o644); err != nil {
				t.Fatal(err)
			}
			poll := func(want string) {
				t.Helper()
				got := w.Latest()
				for deadline := time.Now().Add(5 * time.Second); got != want && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
					got = w.Latest()
				}
				if got != want {
					t.Errorf("Latest: %q, want %q", got, want)
				}
			}
			poll(tc.want)
			if tc.want == "a" {
				return
			}
			// the check arms the next one
			if err := os.WriteFile(f, []byte("ccc"), 0o644); err != nil {
				t.Fatal(err)
			}
			poll("ccc")
		})
	}
}
