package kubenode

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ControllerLease is the Lease, in kube-system, by which the
// kube-controller-managers elect the one that runs the controllers.
const ControllerLease = "kube-controller-manager"

// leaderPoll is how often WaitLeader reads the Lease.
var leaderPoll = 500 * time.Millisecond

// leaderWaitMore is how much longer than twice the Lease's duration
// WaitLeader waits.
var leaderWaitMore = 10 * time.Second

// defaultLeaseDuration is the controller manager's
// --leader-elect-lease-duration, for a Lease that does not say its own.
const defaultLeaseDuration = 15 * time.Second

// NoLeaderError is a Lease that no running process renewed in time.
type NoLeaderError struct {
	Lease   string
	Holder  string
	Renewed time.Time
	Waited  time.Duration
}

func (e *NoLeaderError) Error() string {
	renewed := "never renewed"
	if !e.Renewed.IsZero() {
		renewed = "last renewed " + e.Renewed.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("no kube-controller-manager renewed the Lease kube-system/%s in %s (held by %q, %s): a drain now would evict pods "+
		"that no controller replaces and leave their addresses in the Services' endpoints; see `docker logs kube-controller-manager` "+
		"on the controlplane nodes, then apply again", e.Lease, e.Waited.Round(time.Second), e.Holder, renewed)
}

// WaitLeader waits until a running kube-controller-manager holds
// ControllerLease, and returns how long it waited. The one that leads
// renews the Lease every retry period (2 s by default): a renewal seen, or
// a new holder, is a leader. A controller manager that stops does not hand
// the Lease over (up to Kubernetes 1.37 at least: the gate
// ControllerManagerReleaseLeaderElectionLockOnExit is off by default), and
// the others take it only once it expires, its duration (15 s) after the
// last renewal: in between, no controller runs. A missing Lease is no
// leader election: nothing to wait for. The wait is bounded by
// leaderWait; an API server that does not answer is asked again
// meanwhile.
func WaitLeader(ctx context.Context, cs kubernetes.Interface) (time.Duration, error) {
	began := time.Now()
	get := func() (*coordinationv1.Lease, error) {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(gctx, ControllerLease, metav1.GetOptions{})
	}
	first, err := get()
	switch {
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		// client-go returns an empty Lease with its error: not a holder
		// to compare the next reads with.
		first = nil
	}
	deadline := time.NewTimer(leaderWait(first))
	defer deadline.Stop()
	tick := time.NewTicker(leaderPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Since(began), ctx.Err()
		case <-deadline.C:
			e := &NoLeaderError{Lease: ControllerLease, Waited: time.Since(began)}
			if first != nil {
				e.Holder = holder(first)
				if first.Spec.RenewTime != nil {
					e.Renewed = first.Spec.RenewTime.Time
				}
			}
			return e.Waited, e
		case <-tick.C:
		}
		l, err := get()
		switch {
		case apierrors.IsNotFound(err):
			return time.Since(began), nil
		case err != nil:
			continue
		case first == nil:
			first = l
			deadline.Reset(max(leaderWait(l)-time.Since(began), 0))
		case renewed(first, l):
			return time.Since(began), nil
		}
	}
}

// leaderWait is how long WaitLeader waits for a leader of l (nil: not
// read yet): twice its duration and leaderWaitMore.
func leaderWait(l *coordinationv1.Lease) time.Duration {
	d := defaultLeaseDuration
	if l != nil && l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return 2*d + leaderWaitMore
}

// renewed says whether the Lease now was renewed, or taken by another
// holder, since it was read as before.
func renewed(before, now *coordinationv1.Lease) bool {
	if holder(now) == "" {
		return false
	}
	if holder(now) != holder(before) {
		return true
	}
	b, n := before.Spec.RenewTime, now.Spec.RenewTime
	return n != nil && (b == nil || n.After(b.Time))
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
