package caddyaudit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func payloads(n int, prefix string) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf(`{"request_id":"%s-%d"}`, prefix, i))
	}
	return out
}

// readAll drains the spool, committing every batch.
func readAll(t *testing.T, s *Spool, max int) [][]byte {
	t.Helper()
	var got [][]byte
	for {
		if !s.Lease(nil) {
			t.Fatal("lease")
		}
		b, err := s.Read(max)
		if err != nil {
			s.Unlease()
			t.Fatal(err)
		}
		if len(b.Records) == 0 {
			s.Unlease()
			return got
		}
		got = append(got, b.Records...)
		s.Commit(b)
		s.Unlease()
	}
}

func equalRecords(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("record %d = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestSpoolRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		batch int
	}{
		{"one", 1, 10},
		{"several batches", 1000, 7},
		{"many", 3000, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenSpool(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := payloads(tc.n, "r")
			for _, p := range want {
				if err := s.Append(p); err != nil {
					t.Fatal(err)
				}
			}
			if !s.Pending() {
				t.Fatal("Pending = false after appends")
			}
			equalRecords(t, readAll(t, s, tc.batch), want)
			if s.Pending() {
				t.Fatal("Pending = true after draining")
			}
			ents, _ := os.ReadDir(s.Dir())
			if len(ents) != 0 {
				t.Fatalf("drained spool left files: %v", ents)
			}
		})
	}
}

func TestSpoolUncommittedIsReadAgain(t *testing.T) {
	s, err := OpenSpool(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := payloads(10, "u")
	if err := s.Append(want...); err != nil {
		t.Fatal(err)
	}
	b1, _ := s.Read(4)
	b2, _ := s.Read(4) // not committed: same records
	equalRecords(t, b2.Records, b1.Records)
	equalRecords(t, readAll(t, s, 3), want)
}

func TestSpoolSurvivesRestartWithCursor(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := payloads(20, "c")
	if err := s.Append(want...); err != nil {
		t.Fatal(err)
	}
	b, _ := s.Read(5)
	s.Commit(b)
	// Events still in memory at shutdown go before the spooled ones.
	head := payloads(3, "head")
	if err := s.Prepend(head); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenSpool(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	// New appends after the restart come last.
	tail := payloads(2, "tail")
	if err := s2.Append(tail...); err != nil {
		t.Fatal(err)
	}
	exp := append(append(append([][]byte{}, head...), want[5:]...), tail...)
	equalRecords(t, readAll(t, s2, 4), exp)
}

func TestSpoolCorruption(t *testing.T) {
	good := payloads(5, "g")
	var clean []byte
	for _, p := range good {
		clean = appendFrame(clean, p)
	}
	frame1 := len(appendFrame(nil, good[0]))
	for _, tc := range []struct {
		name    string
		data    []byte
		want    [][]byte
		badFrom int64
	}{
		{"torn tail header", append(append([]byte{}, clean...), magic0, magic1, 3), good, int64(len(clean))},
		{"torn tail payload", append(append([]byte{}, clean...), appendFrame(nil, []byte("lost record"))[:14]...), good, int64(len(clean))},
		{"garbage tail", append(append([]byte{}, clean...), []byte("garbage!")...), good, int64(len(clean))},
		{"flipped byte in second record", func() []byte {
			b := append([]byte{}, clean...)
			b[frame1+frameHeader+3] ^= 0xff
			return b
		}(), append([][]byte{good[0]}, good[2:]...), int64(frame1)},
		{"garbage head", append([]byte("xx"), clean...), good, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, segName(firstSeq)), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var bad []BadRange
			s, err := OpenSpool(dir, func(b BadRange) { mu.Lock(); bad = append(bad, b); mu.Unlock() })
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			equalRecords(t, readAll(t, s, 2), tc.want)
			if len(bad) == 0 {
				t.Fatal("bad bytes not reported")
			}
			if bad[0].Offset != tc.badFrom || bad[0].Length <= 0 {
				t.Fatalf("bad range %+v, want offset %d", bad[0], tc.badFrom)
			}
		})
	}
}

func TestSpoolRejectsHugeRecord(t *testing.T) {
	s, err := OpenSpool(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Append(make([]byte, maxRecordSize+1)); err == nil {
		t.Fatal("want error for oversized record")
	}
}

func TestSpoolSharedAcquire(t *testing.T) {
	dir := t.TempDir()
	a, err := acquireSpool(dir, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := acquireSpool(dir+"/", 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("one spool per directory")
	}
	releaseSpool(a)
	if err := b.Append([]byte("x")); err != nil {
		t.Fatalf("spool closed while still referenced: %v", err)
	}
	releaseSpool(b)
	if err := b.Append([]byte("x")); err == nil {
		t.Fatal("spool still open after last release")
	}
}

// FuzzSpoolReader feeds arbitrary bytes as a spool segment: reading never
// panics, every record returned passed its checksum, and records appended
// after the damage are still read.
func FuzzSpoolReader(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, []byte(`{"a":1}`)), []byte(`{"b":2}`)))
	f.Add([]byte{magic0, magic1, 0xff, 0xff, 0xff, 0xff})
	f.Add(append(appendFrame(nil, []byte("x")), magic0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var reported int64
		used := decodeFrames(data, true, func(p []byte) bool {
			if len(p) > maxRecordSize {
				t.Fatalf("record of %d bytes", len(p))
			}
			return true
		}, func(off, n int) {
			if off < 0 || n <= 0 || off+n > len(data) {
				t.Fatalf("bad range %d+%d of %d", off, n, len(data))
			}
			reported += int64(n)
		})
		if used != len(data) {
			t.Fatalf("consumed %d of %d", used, len(data))
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(firstSeq)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := OpenSpool(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		marker := []byte("after-damage")
		if err := s.Append(marker); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			b, err := s.Read(64)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Records) == 0 {
				t.Fatal("marker record not read")
			}
			s.Commit(b)
			if bytes.Equal(b.Records[len(b.Records)-1], marker) {
				return
			}
		}
		t.Fatal("no progress")
	})
}

// TestSpoolConcurrentAppends appends from many goroutines at once, across
// segments: every record is read back exactly once, each goroutine's in
// its order.
func TestSpoolConcurrentAppends(t *testing.T) {
	s, err := OpenSpool(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetMaxSize(512 << 10) // 64 KiB segments: the appends rotate
	const writers, each = 64, 200
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := s.Append([]byte(fmt.Sprintf("%d/%d", g, i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	next := make([]int, writers)
	for _, r := range readAll(t, s, 500) {
		var g, i int
		if _, err := fmt.Sscanf(string(r), "%d/%d", &g, &i); err != nil {
			t.Fatalf("record %q: %v", r, err)
		}
		if i != next[g] {
			t.Fatalf("writer %d: record %d after %d", g, i, next[g]-1)
		}
		next[g]++
	}
	for g, n := range next {
		if n != each {
			t.Fatalf("writer %d: %d records read back, want %d", g, n, each)
		}
	}
}
