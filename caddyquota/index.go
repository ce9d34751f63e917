package caddyquota

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// The consumer index (consumers.log) names the store's slots: one record
// per slot, appended (and in the kernel's page cache) before the slot's
// first count, so that no count is ever without its consumer:
//
//	u32 payload length | u32 CRC-32 (IEEE) of the payload | payload
//	payload: u32 slot | u8 plan length | plan | consumer
//
// A record cut short or damaged (a power loss while it was written) ends
// the log: it and what follows are dropped when the store opens.

const maxIndexRecord = 4 + 1 + 64 + MaxConsumerLen

// indexRecord is one slot's names.
type indexRecord struct {
	slot     uint32
	plan     string
	consumer string
}

func appendIndexRecord(b []byte, r indexRecord) []byte {
	payload := 4 + 1 + len(r.plan) + len(r.consumer)
	b = binary.LittleEndian.AppendUint32(b, uint32(payload))
	crcAt := len(b)
	b = append(b, 0, 0, 0, 0)
	start := len(b)
	b = binary.LittleEndian.AppendUint32(b, r.slot)
	b = append(b, byte(len(r.plan)))
	b = append(b, r.plan...)
	b = append(b, r.consumer...)
	binary.LittleEndian.PutUint32(b[crcAt:], crc32.ChecksumIEEE(b[start:]))
	return b
}

// readIndex reads the records of an index file and returns them with the
// length of its valid part.
func readIndex(f *os.File) ([]indexRecord, int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	var (
		out  []indexRecord
		good int64
		head [8]byte
		buf  []byte
	)
	for {
		if _, err := io.ReadFull(br, head[:]); err != nil {
			return out, good, nil // the end, or a head cut short
		}
		n := binary.LittleEndian.Uint32(head[:4])
		if n < 5 || n > maxIndexRecord {
			return out, good, nil
		}
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return out, good, nil
		}
		if crc32.ChecksumIEEE(buf) != binary.LittleEndian.Uint32(head[4:]) {
			return out, good, nil
		}
		r := indexRecord{slot: binary.LittleEndian.Uint32(buf)}
		pl := int(buf[4])
		if 5+pl > len(buf) {
			return out, good, nil
		}
		r.plan = string(buf[5 : 5+pl])
		r.consumer = string(buf[5+pl:])
		if r.slot != uint32(len(out)) {
			return nil, 0, fmt.Errorf("consumer index %s: record %d names slot %d", f.Name(), len(out), r.slot)
		}
		out = append(out, r)
		good += int64(8 + n)
	}
}

// openIndex opens (creating) the index at path, drops a damaged tail, and
// returns its records and the file positioned for appending.
func openIndex(path string) (*os.File, []indexRecord, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	recs, good, err := readIndex(f)
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil && st.Size() != good {
			err = f.Truncate(good)
		}
	}
	if err == nil {
		_, err = f.Seek(good, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, nil, errors.Join(fmt.Errorf("consumer index %s", path), err)
	}
	return f, recs, nil
}
