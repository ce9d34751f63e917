package caddyaudit

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// The spool is an append-only log of framed records in segment files
// (<seq>.seg, seq in hex, read in ascending order). A frame is
//
//	magic (2 bytes 0xA7 0x5D) | length (uint32 LE) | CRC-32C of payload (uint32 LE) | payload
//
// A frame that fails its checks (a torn write at the tail, or corruption)
// is skipped up to the next valid frame and reported; it never stops the
// replay of the good frames around it.
const (
	magic0        = 0xA7
	magic1        = 0x5D
	frameHeader   = 10
	maxRecordSize = 1 << 20
	segmentMax    = 16 << 20
	readChunk     = 2*maxRecordSize + 2*frameHeader
	syncEvery     = 256
	cursorFile    = "cursor.json"
	firstSeq      = uint64(1) << 40
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends payload as one frame.
func appendFrame(buf, payload []byte) []byte {
	var h [frameHeader]byte
	h[0], h[1] = magic0, magic1
	binary.LittleEndian.PutUint32(h[2:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[6:], crc32.Checksum(payload, castagnoli))
	buf = append(buf, h[:]...)
	return append(buf, payload...)
}

type frameStatus int

const (
	frameOK    frameStatus = iota
	frameShort             // b ends before the frame does
	frameBad               // b does not start with a valid frame
)

// parseFrame parses the frame at the start of b.
func parseFrame(b []byte) (payload []byte, n int, st frameStatus) {
	if len(b) >= 1 && b[0] != magic0 || len(b) >= 2 && b[1] != magic1 {
		return nil, 0, frameBad
	}
	if len(b) < frameHeader {
		return nil, 0, frameShort
	}
	l := binary.LittleEndian.Uint32(b[2:])
	if l > maxRecordSize {
		return nil, 0, frameBad
	}
	end := frameHeader + int(l)
	if len(b) < end {
		return nil, 0, frameShort
	}
	p := b[frameHeader:end]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(b[6:]) {
		return nil, 0, frameBad
	}
	return p, end, frameOK
}

// resync returns the first offset in b where a frame may start (valid, or
// cut short by the end of b), or len(b).
func resync(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != magic0 {
			continue
		}
		if _, _, st := parseFrame(b[i:]); st != frameBad {
			return i
		}
	}
	return len(b)
}

// decodeFrames decodes the frames of b, a region that ends where the data
// ends when final is true. It calls fn for each good payload (which aliases
// b) until fn returns false, and bad for each skipped range. It returns how
// many bytes it consumed: short of len(b) only when a frame is cut by the
// end of a non-final region or fn stopped.
func decodeFrames(b []byte, final bool, fn func(p []byte) bool, bad func(off, n int)) int {
	pos := 0
	for pos < len(b) {
		p, n, st := parseFrame(b[pos:])
		switch st {
		case frameOK:
			if !fn(p) {
				return pos
			}
			pos += n
		case frameShort:
			if !final {
				return pos
			}
			bad(pos, len(b)-pos) // torn tail
			return len(b)
		case frameBad:
			skip := 1 + resync(b[pos+1:])
			bad(pos, skip)
			pos += skip
		}
	}
	return pos
}

// BadRange describes bytes of a spool segment that were skipped.
type BadRange struct {
	File   string
	Offset int64
	Length int64
}

// Spool is a disk queue of records. Appends and reads may run
// concurrently; a reader leases the spool (Lease) for a read-send-commit
// cycle so that two workers sharing it during a config reload never
// deliver the same records twice or skip any.
type Spool struct {
	dir   string
	bad   func(BadRange)
	lease chan struct{}
	// notify gets a value (without blocking) after every append.
	notify chan struct{}

	mu       sync.Mutex
	segs     []uint64 // sorted
	offs     map[uint64]int64
	reported map[uint64]int64
	w        *os.File
	wbuf     *bufio.Writer
	wseq     uint64
	wsize    int64
	unsynced int
	closed   bool
	fbuf     []byte
	rbuf     []byte

	syncStop chan struct{}
	syncDone chan struct{}
}

// startSyncer fsyncs buffered appends every interval, so that records
// reach the disk even while the sink's worker is busy retrying.
func (s *Spool) startSyncer(interval time.Duration, onErr func(error)) {
	s.syncStop, s.syncDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.syncDone)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if err := s.Sync(); err != nil && onErr != nil {
					onErr(err)
				}
			case <-s.syncStop:
				return
			}
		}
	}()
}

func segName(seq uint64) string { return fmt.Sprintf("%016x.seg", seq) }

// OpenSpool opens (creating) the spool in dir. bad is called for every
// range of bytes that had to be skipped.
func OpenSpool(dir string, bad func(BadRange)) (*Spool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating spool_dir %q: %w", dir, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading spool_dir %q: %w", dir, err)
	}
	if bad == nil {
		bad = func(BadRange) {}
	}
	s := &Spool{dir: dir, bad: bad, lease: make(chan struct{}, 1), notify: make(chan struct{}, 1),
		offs: map[uint64]int64{}, reported: map[uint64]int64{}}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".seg") || e.IsDir() {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(name, ".seg"), 16, 64)
		if err != nil {
			continue
		}
		s.segs = append(s.segs, seq)
	}
	sort.Slice(s.segs, func(i, j int) bool { return s.segs[i] < s.segs[j] })
	if b, err := os.ReadFile(filepath.Join(dir, cursorFile)); err == nil {
		var cur map[string]int64
		if json.Unmarshal(b, &cur) == nil {
			for k, v := range cur {
				if seq, err := strconv.ParseUint(k, 16, 64); err == nil && v > 0 {
					s.offs[seq] = v
				}
			}
		}
	}
	return s, nil
}

// Dir returns the spool's directory.
func (s *Spool) Dir() string { return s.dir }

// Notify returns a channel that receives after appends.
func (s *Spool) Notify() <-chan struct{} { return s.notify }

func (s *Spool) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Append adds records at the end of the spool. They reach the file (the
// kernel's page cache) before Append returns, so a crash of the process
// loses none of them; fsync, which guards against a power loss, runs every
// syncEvery records and on Sync/Close.
func (s *Spool) Append(payloads ...[]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("spool closed")
	}
	for _, p := range payloads {
		if len(p) > maxRecordSize {
			return fmt.Errorf("record of %d bytes exceeds the spool limit of %d", len(p), maxRecordSize)
		}
		if s.w == nil || s.wsize >= segmentMax {
			if err := s.rotateLocked(); err != nil {
				return err
			}
		}
		s.fbuf = appendFrame(s.fbuf[:0], p)
		if _, err := s.wbuf.Write(s.fbuf); err != nil {
			return fmt.Errorf("writing spool: %w", err)
		}
		s.wsize += int64(len(s.fbuf))
		s.unsynced++
	}
	if s.unsynced >= syncEvery {
		if err := s.syncLocked(); err != nil {
			return err
		}
	} else if err := s.wbuf.Flush(); err != nil {
		return fmt.Errorf("writing spool: %w", err)
	}
	s.signal()
	return nil
}

func (s *Spool) rotateLocked() error {
	if s.w != nil {
		if err := s.syncLocked(); err != nil {
			return err
		}
		s.w.Close()
		s.w = nil
	}
	seq := firstSeq
	if n := len(s.segs); n > 0 {
		seq = s.segs[n-1] + 1
	}
	f, err := os.OpenFile(filepath.Join(s.dir, segName(seq)), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("creating spool segment: %w", err)
	}
	s.w, s.wseq, s.wsize = f, seq, 0
	if s.wbuf == nil {
		s.wbuf = bufio.NewWriterSize(f, 64<<10)
	} else {
		s.wbuf.Reset(f)
	}
	s.segs = append(s.segs, seq)
	return nil
}

// Prepend writes records into a new segment that is read before every
// other one (used at shutdown for events that were still in memory, which
// are older than what is in the spool).
func (s *Spool) Prepend(payloads [][]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("spool closed")
	}
	if len(s.segs) == 0 {
		s.mu.Unlock()
		err := s.Append(payloads...)
		s.mu.Lock()
		return err
	}
	seq := s.segs[0] - 1
	var buf []byte
	for _, p := range payloads {
		if len(p) <= maxRecordSize {
			buf = appendFrame(buf, p)
		}
	}
	path := filepath.Join(s.dir, segName(seq))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating spool segment: %w", err)
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("writing spool segment: %w", err)
	}
	s.segs = append([]uint64{seq}, s.segs...)
	s.signal()
	return nil
}

// Sync flushes buffered appends and fsyncs the active segment.
func (s *Spool) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.syncLocked()
}

func (s *Spool) syncLocked() error {
	if s.w == nil {
		return nil
	}
	if s.unsynced == 0 && s.wbuf.Buffered() == 0 {
		return nil
	}
	if err := s.wbuf.Flush(); err != nil {
		return fmt.Errorf("writing spool: %w", err)
	}
	s.unsynced = 0
	if err := s.w.Sync(); err != nil {
		return fmt.Errorf("syncing spool: %w", err)
	}
	return nil
}

// Pending reports whether the spool holds unread records.
func (s *Spool) Pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch len(s.segs) {
	case 0:
		return false
	case 1:
		if s.w != nil && s.segs[0] == s.wseq {
			return s.offs[s.wseq] < s.wsize
		}
	}
	return true
}

// Lease takes the spool for one read-send-commit cycle. It returns false
// when done is closed first.
func (s *Spool) Lease(done <-chan struct{}) bool {
	select {
	case s.lease <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// Unlease ends a Lease.
func (s *Spool) Unlease() { <-s.lease }

// SpoolBatch is a batch read from the spool; Commit it once delivered.
type SpoolBatch struct {
	Records [][]byte
	seq     uint64
	end     int64
}

// Read returns up to max records from the head of the spool, without
// removing them. The caller must hold the lease. An empty batch means the
// spool is empty; its files are then removed.
func (s *Spool) Read(max int) (SpoolBatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.segs) > 0 {
		seq := s.segs[0]
		active := s.w != nil && seq == s.wseq
		off := s.offs[seq]
		var limit int64
		if active {
			if err := s.wbuf.Flush(); err != nil {
				return SpoolBatch{}, fmt.Errorf("writing spool: %w", err)
			}
			limit = s.wsize
		} else {
			fi, err := os.Stat(filepath.Join(s.dir, segName(seq)))
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					s.dropHeadLocked()
					continue
				}
				return SpoolBatch{}, err
			}
			limit = fi.Size()
		}
		if off >= limit {
			if active {
				// Everything was delivered: start afresh.
				s.resetLocked()
				return SpoolBatch{}, nil
			}
			s.dropHeadLocked()
			continue
		}
		n := limit - off
		final := true
		if n > readChunk {
			n, final = readChunk, false
		}
		if cap(s.rbuf) < int(n) {
			s.rbuf = make([]byte, n)
		}
		buf := s.rbuf[:n]
		if err := s.readAt(seq, buf, off, active); err != nil {
			return SpoolBatch{}, err
		}
		var recs [][]byte
		used := decodeFrames(buf, final, func(p []byte) bool {
			if len(recs) >= max {
				return false
			}
			recs = append(recs, append([]byte(nil), p...))
			return true
		}, func(o, l int) {
			at := off + int64(o)
			if at >= s.reported[seq] {
				s.reported[seq] = at + int64(l)
				s.bad(BadRange{File: filepath.Join(s.dir, segName(seq)), Offset: at, Length: int64(l)})
			}
		})
		end := off + int64(used)
		if len(recs) == 0 {
			// Only bad bytes in this region: skip them for good.
			s.offs[seq] = end
			if used == 0 {
				return SpoolBatch{}, fmt.Errorf("spool segment %s: no progress at offset %d", segName(seq), off)
			}
			continue
		}
		return SpoolBatch{Records: recs, seq: seq, end: end}, nil
	}
	return SpoolBatch{}, nil
}

func (s *Spool) readAt(seq uint64, buf []byte, off int64, active bool) error {
	f, err := os.Open(filepath.Join(s.dir, segName(seq)))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadAt(buf, off)
	if err == io.EOF {
		err = nil
	}
	return err
}

func (s *Spool) dropHeadLocked() {
	seq := s.segs[0]
	os.Remove(filepath.Join(s.dir, segName(seq)))
	delete(s.offs, seq)
	delete(s.reported, seq)
	s.segs = s.segs[1:]
}

func (s *Spool) resetLocked() {
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
	for _, seq := range s.segs {
		os.Remove(filepath.Join(s.dir, segName(seq)))
	}
	s.segs = nil
	s.offs = map[uint64]int64{}
	s.reported = map[uint64]int64{}
	os.Remove(filepath.Join(s.dir, cursorFile))
}

// Commit marks a batch as delivered.
func (s *Spool) Commit(b SpoolBatch) {
	if len(b.Records) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b.end > s.offs[b.seq] {
		s.offs[b.seq] = b.end
	}
}

// Close syncs the spool and records the read position so that a restart
// does not deliver the same records again.
func (s *Spool) Close() error {
	if s.syncStop != nil {
		select {
		case <-s.syncStop:
		default:
			close(s.syncStop)
		}
		<-s.syncDone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.syncLocked()
	if s.w != nil {
		s.w.Close()
		s.w = nil
	}
	cur := map[string]int64{}
	for _, seq := range s.segs {
		if o := s.offs[seq]; o > 0 {
			cur[strconv.FormatUint(seq, 16)] = o
		}
	}
	path := filepath.Join(s.dir, cursorFile)
	if len(cur) == 0 {
		os.Remove(path)
		return err
	}
	b, _ := json.Marshal(cur)
	tmp := path + ".tmp"
	if werr := os.WriteFile(tmp, b, 0o600); werr != nil {
		return errors.Join(err, werr)
	}
	return errors.Join(err, os.Rename(tmp, path))
}

// spools holds one *Spool per directory in the process, so that the
// workers of an old and a new config share it during a reload; the last
// release closes it.
var spools = caddy.NewUsagePool()

func acquireSpool(dir string, bad func(BadRange)) (*Spool, error) {
	dir = filepath.Clean(dir)
	val, _, err := spools.LoadOrNew(dir, func() (caddy.Destructor, error) {
		s, err := OpenSpool(dir, bad)
		if err != nil {
			return nil, err
		}
		s.startSyncer(200*time.Millisecond, nil)
		return s, nil
	})
	if err != nil {
		return nil, err
	}
	return val.(*Spool), nil
}

func releaseSpool(s *Spool) error {
	_, err := spools.Delete(s.dir)
	return err
}

// Destruct closes the spool when its last user releases it.
func (s *Spool) Destruct() error { return s.Close() }
