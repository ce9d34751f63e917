package caddyaudit

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestFileSink(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "audit.jsonl")
	s, err := newFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := s.Send(context.Background(), []record{{data: []byte(`{"a":1}`)}, {data: []byte(`{"b":2}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"a\":1}\n{\"b\":2}\n{\"a\":1}\n{\"b\":2}\n"; string(b) != want {
		t.Fatalf("file %q, want %q", b, want)
	}
	if _, err := newFileSink(filepath.Join(path, "x")); err == nil {
		t.Fatal("want error for a path under a file")
	}
}
