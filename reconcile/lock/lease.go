package lock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// HolderAnnotation is the annotation of a Lease that holds its holder's
// Holder as JSON, so that a refused reconciler can name it.
const HolderAnnotation = "rigger.io/holder"

// Default lease timing, as Kubernetes' own controllers use.
const (
	// DefaultLeaseDuration is how long a lease lasts without renewal: a
	// crashed holder blocks others this long.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultRenewDeadline is how long the holder keeps trying to renew
	// before it gives up the lease and stops its work.
	DefaultRenewDeadline = 10 * time.Second
	// DefaultRetryPeriod is the time between two attempts to take or
	// renew a lease.
	DefaultRetryPeriod = 2 * time.Second
)

// ErrLost is the cause of the context returned by Lease when the lease was
// lost: someone else took it over, or it could not be renewed in time.
var ErrLost = errors.New("lease lost: stop, another reconciler may be running")

// LeaseTiming says how a lease is held. A zero field takes its default
// (DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod).
// Duration > RenewDeadline > 1.2 × RetryPeriod must hold, and Duration is at
// least a second since a Lease records whole seconds.
type LeaseTiming struct {
	// Duration is how long a lease lasts without renewal.
	Duration time.Duration
	// RenewDeadline is how long the holder retries renewing before it
	// gives the lease up.
	RenewDeadline time.Duration
	// RetryPeriod is the time between two attempts to take or renew.
	RetryPeriod time.Duration
	// Now is the clock that judges whether a holder's lease has expired
	// (nil: time.Now).
	Now func() time.Time
}

// withDefaults fills the zero fields of t.
func (t LeaseTiming) withDefaults() LeaseTiming {
	if t.Duration == 0 {
		t.Duration = DefaultLeaseDuration
	}
	if t.RenewDeadline == 0 {
		t.RenewDeadline = DefaultRenewDeadline
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = DefaultRetryPeriod
	}
	if t.Now == nil {
		t.Now = time.Now
	}
	return t
}

// Lease takes the Lease namespace/name in the cluster of client for h, for
// the duration of one piece of work (one apply). h.ID becomes the Lease's
// holderIdentity and h the HolderAnnotation.
//
// If the Lease is held by someone else and not expired, Lease returns a
// *HeldError naming them when !wait; with wait it blocks until it gets the
// lease or ctx ends (then the *HeldError is wrapped with ctx's error). An
// expired lease is taken over once it has gone a whole lease duration
// without renewal as seen from here, as client-go's leader election does:
// that does not trust the holder's clock.
//
// Once held, the lease is renewed in the background. held is cancelled when
// ctx is, or when the lease is lost (context.Cause(held) is then ErrLost):
// the caller must stop its work. release stops renewing, gives the lease up
// if it is still ours, and returns once nothing runs in the background any
// more; call it when the work guarded by the lease is over (never before:
// the next holder starts at once). Calling it more than once is harmless.
func Lease(ctx context.Context, client kubernetes.Interface, namespace, name string, h Holder, wait bool, d LeaseTiming) (held context.Context, release func(), err error) {
	desc := fmt.Sprintf("lease %s/%s", namespace, name)
	t := d.withDefaults()
	leases := client.CoordinationV1().Leases(namespace)
	if !wait {
		now := t.Now()
		holder, err := otherHolder(ctx, leases, name, h.ID, now)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", desc, err)
		}
		if holder != nil {
			return nil, nil, &HeldError{Holder: *holder, Lock: desc, At: now}
		}
	}
	annotation, err := json.Marshal(h)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the holder of %s: %w", desc, err)
	}
	acquired := make(chan context.Context, 1)
	le, err := newElector(client, namespace, name, h.ID, string(annotation), t, func(lctx context.Context) {
		acquired <- lctx
	})
	if err != nil {
		return nil, nil, fmt.Errorf("take %s: %w", desc, err)
	}

	// The elector runs until release, not until ctx ends: the work guarded
	// by the lease must be over before the lease is given up.
	runCtx, stop := context.WithCancel(klog.NewContext(context.WithoutCancel(ctx), logr.Discard()))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		le.Run(runCtx)
	}()
	// giveUp stops the elector and gives the lease up if it is ours.
	giveUp := func() {
		stop()
		<-stopped
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.RenewDeadline)
		defer cancel()
		// Best effort: if it fails, the lease expires after t.Duration.
		_ = releaseLease(releaseCtx, leases, name, h.ID)
	}

	var limit <-chan time.Time
	if !wait {
		// The lease looked free or expired: an expired one is taken over
		// after a whole duration without renewal.
		timer := time.NewTimer(t.Duration + t.RenewDeadline)
		defer timer.Stop()
		limit = timer.C
	}
	select {
	case lctx := <-acquired:
		heldCtx, cancelHeld := context.WithCancelCause(ctx)
		stopWatch := context.AfterFunc(lctx, func() {
			cancelHeld(fmt.Errorf("%s: %w", desc, ErrLost))
		})
		var once sync.Once
		return heldCtx, func() {
			once.Do(func() {
				stopWatch()
				cancelHeld(fmt.Errorf("%s released", desc))
				giveUp()
			})
		}, nil
	case <-ctx.Done():
		giveUp()
		err := fmt.Errorf("stop waiting for %s: %w", desc, context.Cause(ctx))
		now := t.Now()
		if holder, herr := otherHolder(context.WithoutCancel(ctx), leases, name, h.ID, now); herr == nil && holder != nil {
			err = fmt.Errorf("%w: %w", err, &HeldError{Holder: *holder, Lock: desc, At: now})
		}
		return nil, nil, err
	case <-limit:
		giveUp()
		holder, err := otherHolder(ctx, leases, name, h.ID, time.Time{})
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", desc, err)
		}
		if holder == nil {
			holder = &Holder{ID: "another reconciler"}
		}
		return nil, nil, &HeldError{Holder: *holder, Lock: desc, At: t.Now()}
	}
}

// newElector returns a leader elector on the Lease namespace/name for id,
// writing annotation as HolderAnnotation while id holds it. It never gives
// the lease up by itself (no ReleaseOnCancel: client-go would release it
// before the work's context is cancelled); callers use releaseLease once
// the work is over.
func newElector(client kubernetes.Interface, namespace, name, id, annotation string, t LeaseTiming, started func(context.Context)) (*leaderelection.LeaderElector, error) {
	if t.Duration < time.Second {
		return nil, fmt.Errorf("lease duration %s is under a second, which a Lease cannot record: make it at least 1s", t.Duration)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     annotatingLeases{LeasesGetter: client.CoordinationV1(), id: id, annotation: annotation},
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: t.Duration,
		RenewDeadline: t.RenewDeadline,
		RetryPeriod:   t.RetryPeriod,
		Name:          namespace + "/" + name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: started,
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("check lease timing %+v: %w", t, err)
	}
	return le, nil
}

// otherHolder returns who holds the Lease name if it is neither free, nor
// held by id, nor expired at now (by the timestamps in the Lease); a zero
// now skips the expiry check.
func otherHolder(ctx context.Context, leases coordinationv1client.LeaseInterface, name, id string, now time.Time) (*Holder, error) {
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
	if r.HolderIdentity == "" || r.HolderIdentity == id {
		return nil, nil
	}
	if !now.IsZero() {
		renewed := r.RenewTime.Time
		if renewed.IsZero() {
			renewed = r.AcquireTime.Time
		}
		if renewed.Add(time.Duration(r.LeaseDurationSeconds) * time.Second).Before(now) {
			return nil, nil
		}
	}
	h, err := parseHolder([]byte(l.Annotations[HolderAnnotation]))
	if err != nil || h.ID != r.HolderIdentity {
		// Not ours, or left over from an earlier holder.
		h = Holder{ID: r.HolderIdentity}
	}
	if h.Since.IsZero() {
		h.Since = r.AcquireTime.Time
	}
	return &h, nil
}

// releaseLease gives the Lease name up if id still holds it, the way
// client-go does: no holder, a one-second duration.
func releaseLease(ctx context.Context, leases coordinationv1client.LeaseInterface, name, id string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != id {
			return nil
		}
		r := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
		now := metav1.Now()
		l.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(&resourcelock.LeaderElectionRecord{
			LeaderTransitions:    r.LeaderTransitions,
			LeaseDurationSeconds: 1,
			AcquireTime:          now,
			RenewTime:            now,
		})
		delete(l.Annotations, HolderAnnotation)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}

// annotatingLeases is the Lease client of a resourcelock.LeaseLock: it
// writes HolderAnnotation along with every write of the lease, in the same
// request, so that the annotation never names someone who does not hold it.
type annotatingLeases struct {
	coordinationv1client.LeasesGetter
	id         string
	annotation string
}

// Leases returns the annotating client of the Leases of namespace.
func (a annotatingLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return annotatingLeaseClient{LeaseInterface: a.LeasesGetter.Leases(namespace), id: a.id, annotation: a.annotation}
}

// annotatingLeaseClient sets or clears HolderAnnotation on Create and
// Update, the only writes resourcelock.LeaseLock makes.
type annotatingLeaseClient struct {
	coordinationv1client.LeaseInterface
	id         string
	annotation string
}

// Create creates l with the annotation.
func (c annotatingLeaseClient) Create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return c.LeaseInterface.Create(ctx, c.annotate(l), opts)
}

// Update updates l with the annotation.
func (c annotatingLeaseClient) Update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return c.LeaseInterface.Update(ctx, c.annotate(l), opts)
}

// annotate returns a copy of l with the annotation set when c.id holds it,
// removed otherwise.
func (c annotatingLeaseClient) annotate(l *coordinationv1.Lease) *coordinationv1.Lease {
	l = l.DeepCopy()
	if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == c.id {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[HolderAnnotation] = c.annotation
	} else {
		delete(l.Annotations, HolderAnnotation)
	}
	return l
}
