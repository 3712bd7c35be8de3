package apiretry

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rigger/rigger/internal/testwait"
)

// TestPasses: an etcd hiccup behind the API server passes; a 500 for a
// field the schema does not have does not.
func TestPasses(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{apierrors.NewInternalError(errors.New("etcdserver: leader changed")), true},
		{apierrors.NewInternalError(errors.New("rpc error: code = Unavailable desc = keepalive ping failed to receive ACK within timeout")), true},
		{apierrors.NewInternalError(errors.New("failed to create typed patch object (default/x; /v1, Kind=ConfigMap): .datta: field not declared in schema")), false},
		{apierrors.NewServiceUnavailable("restarting"), true},
		{apierrors.NewTooManyRequests("busy", 1), true},
		{apierrors.NewBadRequest("no"), false},
		{apierrors.NewConflict(nodes, "x", errors.New("changed")), false},
		{fmt.Errorf("dial tcp 10.0.0.1:6443: %w", syscall.ECONNREFUSED), true},
		{errors.New("dial tcp: lookup api: no such host"), false},
	}
	for _, tt := range tests {
		if got := Passes(tt.err); got != tt.want {
			t.Errorf("Passes(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// nodes is the resource of the tests' errors.
var nodes = schema.GroupResource{Resource: "nodes"}

// quick is a backoff that does not slow the tests down.
var quick = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 4}

func TestDo(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("restarting")
	forbidden := apierrors.NewForbidden(nodes, "x", errors.New("no"))
	tests := []struct {
		name    string
		answers []error // fn's answers in turn; the last one repeats
		want    error
		calls   int
	}{
		{"at once", []error{nil}, nil, 1},
		{"after a failure that passes", []error{unavailable, unavailable, nil}, nil, 3},
		{"a failure that does not pass ends it", []error{unavailable, forbidden, nil}, forbidden, 2},
		{"the last failure when the steps are spent", []error{unavailable}, unavailable, quick.Steps},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := Do(context.Background(), quick, Passes, func(context.Context) error {
				calls++
				return tt.answers[min(calls, len(tt.answers))-1]
			})
			if err != tt.want || calls != tt.calls {
				t.Errorf("Do = %v after %d calls, want %v after %d", err, calls, tt.want, tt.calls)
			}
		})
	}
}

// TestDoStopsWithContext: Do returns when ctx ends, not when the backoff
// is spent, with the call's last failure.
func TestDoStopsWithContext(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("restarting")
	ctx, cancel := context.WithCancel(context.Background())
	slow := wait.Backoff{Duration: time.Hour, Steps: 3}
	done := make(chan error, 1)
	go func() {
		done <- Do(ctx, slow, Passes, func(context.Context) error {
			cancel() // ctx ends while Do waits to call again
			return unavailable
		})
	}()
	if err := testwait.Recv(t, done, time.Minute, "Do's return after ctx ended", nil); err != unavailable {
		t.Errorf("Do = %v, want %v", err, unavailable)
	}

	if err := Do(ctx, slow, Passes, func(context.Context) error { t.Error("called after ctx ended"); return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("Do with an ended ctx = %v, want %v", err, context.Canceled)
	}
}
