package caddyaudit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// fileSink appends events as JSON lines and fsyncs every batch.
type fileSink struct {
	f   *os.File
	buf []byte
}

func newFileSink(path string) (*fileSink, error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating directory of audit file %q: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening audit file: %w", err)
	}
	return &fileSink{f: f}, nil
}

func (s *fileSink) Send(_ context.Context, recs []record) error {
	s.buf = s.buf[:0]
	for _, r := range recs {
		s.buf = append(s.buf, r.data...)
		s.buf = append(s.buf, '\n')
	}
	if _, err := s.f.Write(s.buf); err != nil {
		return err
	}
	return s.f.Sync()
}

func (s *fileSink) Close() error { return s.f.Close() }
