package caddysuite

import (
	"bytes"
	"io"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(countWriter{})
}

// Requests counts the access log records written to the CountLog log: one
// per request, on either request path.
var Requests atomic.Int64

// countWriter is the log writer caddy.logging.writers.caddysuite_count,
// which counts access log records ("handled request" and "NOP").
type countWriter struct{}

// CaddyModule returns the Caddy module information.
func (countWriter) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.logging.writers.caddysuite_count",
		New: func() caddy.Module { return new(countWriter) },
	}
}

func (countWriter) String() string    { return "caddysuite_count" }
func (countWriter) WriterKey() string { return "caddysuite_count" }

func (countWriter) OpenWriter() (io.WriteCloser, error) { return counter{}, nil }

type counter struct{}

func (counter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"msg":"handled request"`)) || bytes.Contains(p, []byte(`"msg":"NOP"`)) {
		Requests.Add(1)
	}
	return len(p), nil
}

func (counter) Close() error { return nil }

// Interface guards
var _ caddy.WriterOpener = (*countWriter)(nil)
