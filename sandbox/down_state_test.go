package sandbox

import (
	"os"
	"strings"
	"testing"
)

// TestProcessState: the state and name of a running process, and "gone"
// for one that is not.
func TestProcessState(t *testing.T) {
	got := processState(os.Getpid())
	if len(got) < 3 || !strings.Contains("RSD", got[:1]) || got[1] != ' ' {
		t.Errorf("processState(self) = %q, want a state letter and the name", got)
	}
	if got := processState(1 << 30); got != "gone" {
		t.Errorf("processState(no such pid) = %q, want gone", got)
	}
}
