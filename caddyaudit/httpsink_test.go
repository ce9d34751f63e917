package caddyaudit

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestHTTPSinkErrorHidesSecrets(t *testing.T) {
	_, url := newFlaky(t) // nothing listens
	s := newHTTPSink(strings.Replace(url, "http://", "http://user:pw@", 1)+"?token=s3cret", nil, time.Second)
	defer s.Close()
	err := s.Send(context.Background(), []record{{data: []byte("{}")}})
	if err == nil {
		t.Fatal("want error")
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "pw") {
		t.Fatalf("error leaks a secret: %v", err)
	}
}
