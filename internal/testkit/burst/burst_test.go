package burst

import (
	"sync/atomic"
	"testing"
)

// TestRun: exactly total requests are sent, and the admitted ones are
// counted per target.
func TestRun(t *testing.T) {
	var sent [3]atomic.Int64
	got := Run(100, 6, 3, func(target int) bool {
		return sent[target].Add(1)%2 == 0
	})
	var total int64
	for i := range sent {
		total += sent[i].Load()
		if got[i] != sent[i].Load()/2 {
			t.Errorf("target %d: %d admitted of %d sent, want half", i, got[i], sent[i].Load())
		}
	}
	if total != 100 || Sum(got) > 50 {
		t.Fatalf("%d sent (want 100), %d admitted", total, Sum(got))
	}
}
