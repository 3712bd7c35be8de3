package stall

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/rigger/rigger/reconcile/statedir"
)

// TestClassify: an *Error says its Reason and whether it stalls, however
// deep it is wrapped; any other error is Failed and retried; the text and
// the wrapped error are the cause's.
func TestClassify(t *testing.T) {
	cause := errors.New("cluster.yml asks for nodes with the same address")
	for _, tc := range []struct {
		name        string
		err         error
		wantReason  Reason
		wantStalled bool
	}{
		{"stalls", Stalls(InvalidSpec, cause), InvalidSpec, true},
		{"retries", Retries(LockHeld, cause), LockHeld, false},
		{"wrapped", fmt.Errorf("plan: %w", Stalls(RemovalGuard, cause)), RemovalGuard, true},
		{"joined", errors.Join(errors.New("another"), Stalls(NewCABlocked, cause)), NewCABlocked, true},
		{"a plain error", cause, Failed, false},
		{"none", nil, Failed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, stalled := Classify(tc.err)
			if reason != tc.wantReason || stalled != tc.wantStalled {
				t.Errorf("Classify = %s, stalled %v; want %s, %v", reason, stalled, tc.wantReason, tc.wantStalled)
			}
		})
	}
	err := Stalls(InvalidSpec, cause)
	if err.Error() != cause.Error() || !errors.Is(err, cause) {
		t.Errorf("%q does not say or wrap its cause", err)
	}
}

// TestState: a damaged file of the state directory stalls (a person
// repairs it or moves it away); one that cannot be read is retried; no
// error stays none.
func TestState(t *testing.T) {
	if err := State(nil); err != nil {
		t.Errorf("State(nil) = %v", err)
	}
	damaged := fmt.Errorf("read the nodes: %w", &statedir.DamagedError{Path: "/state/nodes.json", Err: errors.New("unexpected end of JSON input")})
	if reason, stalled := Classify(State(damaged)); reason != StateDamaged || !stalled {
		t.Errorf("a damaged file: %s, stalled %v; want %s, stalled", reason, stalled, StateDamaged)
	}
	unreadable := fmt.Errorf("read the nodes: %w", fs.ErrPermission)
	if reason, stalled := Classify(State(unreadable)); reason != Failed || stalled {
		t.Errorf("an unreadable file: %s, stalled %v; want %s, retried", reason, stalled, Failed)
	}
	if !errors.Is(State(unreadable), fs.ErrPermission) {
		t.Error("State hides its cause")
	}
}
