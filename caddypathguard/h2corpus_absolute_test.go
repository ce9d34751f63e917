package caddypathguard

import (
	"strings"
	"testing"

	"github.com/apigate/gateway/internal/testkit/pathtest"
)

// TestTraversalCorpusH2AbsoluteForm sends the corpus's targets that are not
// origin-form (absolute URIs) as :path. RFC 9113 8.3.1 allows only a path
// (or "*") there; Go's server resets such a stream (PROTOCOL_ERROR), and
// so must the fast path (it served them before: off mode forwarded
// /public/..;/admin/x). One origin-form target goes too, so that the fast
// path serves a request of the server (pathtest checks that it was on).
func TestTraversalCorpusH2AbsoluteForm(t *testing.T) {
	pathtest.RunH2(t, func(t *testing.T, p pathtest.Path, rec *pathtest.Recorder) {
		testTraversalCorpusH2(t, p, rec, func(target string) bool {
			return !strings.HasPrefix(target, "/") || target == corpus[0]
		})
	})
}
