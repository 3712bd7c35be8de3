package testwait

import (
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	calls := 0
	if !Until(10*time.Second, time.Millisecond, func() bool { calls++; return calls == 3 }) || calls != 3 {
		t.Errorf("Until of a condition true at the third check: calls %d", calls)
	}
	if Until(20*time.Millisecond, time.Millisecond, func() bool { return false }) {
		t.Error("Until of a condition never true returned true")
	}
}
