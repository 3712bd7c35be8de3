package kubenode

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestWaitReadyListTimesOut: a wait whose every look at the Nodes is cut
// short by a deadline (its own, or the API server's on a crowded machine)
// reports the Node as not registered, with the kubelet's lines to come and
// the last look's error beside, not the deadline alone; another error of
// the API server is reported as itself.
func TestWaitReadyListTimesOut(t *testing.T) {
	for _, tc := range []struct {
		err      error
		notReady bool
	}{
		{context.DeadlineExceeded, true},
		{errors.New("forbidden: nodes is forbidden"), false},
	} {
		cs := fake.NewClientset()
		cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
		_, err := WaitReady(t.Context(), cs, "10.0.0.4", "", time.Time{}, 100*time.Millisecond)
		var nr *NotReadyError
		if got := errors.As(err, &nr); got != tc.notReady {
			t.Fatalf("list failing with %v: WaitReady = %v; a NotReadyError: %v, want %v", tc.err, err, got, tc.notReady)
		}
		if !strings.Contains(err.Error(), tc.err.Error()) {
			t.Errorf("WaitReady = %q, which does not say the last look's error %q", err, tc.err)
		}
		if tc.notReady && !strings.Contains(err.Error(), "registered no Node") {
			t.Errorf("WaitReady = %q, which does not say no Node registered", err)
		}
	}
}
