package caddyaudit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/apigate/gateway/internal/urls"
)

// httpSink POSTs batches as a JSON array of events.
type httpSink struct {
	url     string
	header  http.Header
	client  *http.Client
	timeout time.Duration
	body    bytes.Buffer
}

func newHTTPSink(url string, header http.Header, timeout time.Duration) *httpSink {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 4
	return &httpSink{url: url, header: header, timeout: timeout, client: &http.Client{Transport: tr}}
}

// encodeBatch writes the records as one JSON array.
func encodeBatch(buf *bytes.Buffer, recs []record) {
	buf.Reset()
	buf.WriteByte('[')
	for i, r := range recs {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(r.data)
	}
	buf.WriteByte(']')
}

// StatusError is a non-2xx answer from an HTTP sink.
type StatusError struct {
	Code int
	Body string
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("receiver answered %d", e.Code)
	}
	return fmt.Sprintf("receiver answered %d: %s", e.Code, e.Body)
}

func (s *httpSink) Send(ctx context.Context, recs []record) error {
	encodeBatch(&s.body, recs)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(s.body.Bytes()))
	if err != nil {
		return &PermanentError{err}
	}
	for k, v := range s.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		// The URL may carry a secret (user info, a query token): name the
		// sink without it.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("POST %s: %w", urls.Redact(s.url), err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	serr := &StatusError{Code: resp.StatusCode, Body: string(bytes.TrimSpace(snippet))}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 &&
		resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
		return &PermanentError{serr}
	}
	return serr
}

func (s *httpSink) Close() error {
	s.client.CloseIdleConnections()
	return nil
}
