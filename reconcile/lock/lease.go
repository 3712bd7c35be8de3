package lock

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
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

	"github.com/rigger/rigger/internal/ctxwait"
	"github.com/rigger/rigger/reconcile/internal/apiretry"
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

// WaitReportInterval is how often Lease tells LeaseOptions.Waiting that it
// still waits for the same holder.
const WaitReportInterval = 10 * time.Second

// LeaseOptions are the choices of Lease.
type LeaseOptions struct {
	// Timing is how the lease is held; a zero field takes its default.
	Timing LeaseTiming
	// Wait makes Lease wait while another holder has the lease, instead
	// of refusing.
	Wait bool
	// Waiting, when set, is told who holds the lease while Lease waits for
	// it: when the holder changes, and at most every WaitReportInterval
	// otherwise.
	Waiting func(*HeldError)
	// Machine tells a holder that crashed on this machine (nil:
	// LocalMachine()).
	Machine *Machine
	// Log receives the takeover of a crashed holder's lease (nil: none).
	Log *slog.Logger
}

// NoAnswerError is returned by Lease when the API server did not answer at
// all (not reachable, or no answer in time) before any answer came: the
// lease could not even be read. Any answer, a refusal included, is an
// error of another kind.
type NoAnswerError struct {
	// Lock is "lease namespace/name".
	Lock string
	Err  error
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("read %s: the API server does not answer: %v", e.Lock, e.Err)
}

func (e *NoAnswerError) Unwrap() error { return e.Err }

// Lease takes the Lease namespace/name in the cluster of client for h, for
// the duration of one piece of work (one apply). h.ID becomes the Lease's
// holderIdentity and h the HolderAnnotation.
//
// A lease held by someone else is taken over only when its holder is gone:
//   - at once when the holder is a process of this machine that has ended
//     (Machine.Gone: a crashed rigger, which the kernel did not release
//     the lease of as it does a lock file);
//   - otherwise once the holder has not renewed it for its whole duration
//     as seen from here, as client-go's leader election does: that does
//     not trust the holder's clock.
//
// Until then, Lease returns a *HeldError naming the holder, unless
// o.Wait; or unless the Lease's own timestamps say it expired already, in
// which case Lease waits for that to be confirmed. With o.Wait it waits
// until it gets the lease or ctx ends (the *HeldError is then wrapped with
// ctx's error), and an API server that stops answering meanwhile (its
// holder restarting it) is waited for too.
//
// An API server that does not answer the first read gives a
// *NoAnswerError. One that answers that it is busy or failing (a 5xx, a
// 429: it may be starting) is asked again for a renew deadline; any other
// failure to read or take the lease, and that one once it lasts, is
// returned as it is.
//
// Once held, the lease is renewed in the background. held is cancelled when
// ctx is, or when the lease is lost (context.Cause(held) is then ErrLost):
// the caller must stop its work. release stops renewing, gives the lease up
// if it is still ours, and returns once nothing runs in the background any
// more; call it when the work guarded by the lease is over (never before:
// the next holder starts at once). Calling it more than once is harmless.
func Lease(ctx context.Context, client kubernetes.Interface, namespace, name string, h Holder, o LeaseOptions) (held context.Context, release func(), err error) {
	desc := fmt.Sprintf("lease %s/%s", namespace, name)
	t := o.Timing.withDefaults()
	if _, err := newElector(client, namespace, name, h.ID, "", nil, nil, t, func(context.Context) {}); err != nil { // checks t
		return nil, nil, fmt.Errorf("take %s: %w", desc, err)
	}
	m := o.Machine
	if m == nil {
		local := LocalMachine()
		m = &local
	}
	annotation, err := json.Marshal(h)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the holder of %s: %w", desc, err)
	}
	leases := client.CoordinationV1().Leases(namespace)
	var (
		answered bool        // the API server answered once
		failing  time.Time   // since when its calls fail, if they do
		last     observation // the holder's renewal as first seen here
		heldErr  *HeldError  // the holder last seen
		told     reported
	)
	// later tells who holds the lease and pauses before the next attempt;
	// it fails when ctx ends first.
	later := func(now time.Time) error {
		told.tell(o.Waiting, heldErr, now)
		if !pause(ctx, t.RetryPeriod) {
			return stopWaiting(ctx, desc, heldErr)
		}
		return nil
	}
	// passing reports whether a failed call is tried again: a busy or
	// starting API server for a renew deadline, and while waiting, one
	// that went away (the holder may be replacing it) for as long.
	passing := func(err error, now time.Time) bool {
		if failing.IsZero() {
			failing = now
		}
		return transient(err) && (o.Wait && answered || now.Sub(failing) < t.RenewDeadline)
	}
	for {
		now := t.Now()
		l, err := readLease(ctx, leases, name, t.RenewDeadline)
		switch {
		case ctx.Err() != nil:
			return nil, nil, stopWaiting(ctx, desc, heldErr)
		case err != nil && !answered && noAnswer(err):
			return nil, nil, &NoAnswerError{Lock: desc, Err: err}
		case err != nil && !passing(err, now):
			return nil, nil, fmt.Errorf("read %s: %w", desc, err)
		case err != nil:
			if err := later(now); err != nil {
				return nil, nil, err
			}
			continue
		}
		answered, failing = true, time.Time{}
		r := judge(l, h.ID, now, last, *m)
		last = r.seen
		if r.verdict == leaseHeld {
			heldErr = &HeldError{Holder: r.holder, Lock: desc, At: now, Expires: r.expires}
			if !o.Wait && !r.stale {
				return nil, nil, heldErr
			}
			if err := later(now); err != nil {
				return nil, nil, err
			}
			continue
		}
		if r.verdict == leaseGone && o.Log != nil {
			o.Log.Warn("taking over the lease of a holder that no longer runs", "lease", namespace+"/"+name, "holder", r.holder.ID)
		}
		err = take(ctx, leases, l, name, h.ID, string(annotation), t, now)
		switch {
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			continue // someone else wrote it meanwhile: read it again
		case err != nil && ctx.Err() != nil:
			return nil, nil, stopWaiting(ctx, desc, heldErr)
		case err != nil && passing(err, now):
			if err := later(now); err != nil {
				return nil, nil, err
			}
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("take %s: %w", desc, err)
		}
		held, release, err := hold(ctx, client, namespace, name, h.ID, string(annotation), t)
		if errors.Is(err, errNotConfirmed) {
			continue // taken over meanwhile: judge again
		}
		if err != nil {
			return nil, nil, fmt.Errorf("take %s: %w", desc, err)
		}
		return held, release, nil
	}
}

// verdict is what a reading of a Lease says to whoever wants it.
type verdict int

const (
	// leaseFree: nobody holds it, or this holder does already.
	leaseFree verdict = iota
	// leaseHeld: another holder has it, and may still be at work.
	leaseHeld
	// leaseExpired: its holder has not renewed it for its whole duration
	// as seen from here.
	leaseExpired
	// leaseGone: its holder is a process of this machine that has ended.
	leaseGone
)

// observation is a holder's last renewal, and when it was first read here.
type observation struct {
	holder string
	renew  time.Time
	at     time.Time
}

// reading is the judgment of one read of a Lease.
type reading struct {
	verdict verdict
	// holder is who holds it (all but leaseFree).
	holder Holder
	// seen is the holder's renewal as first read here, for the next
	// judgment.
	seen observation
	// expires is when the lease expires if it is not renewed, as seen
	// from here: a whole duration after its last renewal was first seen.
	expires time.Time
	// stale is set when the Lease's own timestamps say it expired: its
	// holder's clock says so, which is not enough to take it over.
	stale bool
}

// judge decides about l (nil when there is none) for the holder id at now
// (the caller's clock); last is the observation of the previous reading,
// m tells a holder that ended on this machine. It does no I/O besides
// m.Started.
func judge(l *coordinationv1.Lease, id string, now time.Time, last observation, m Machine) reading {
	if l == nil {
		return reading{verdict: leaseFree}
	}
	r := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
	if r.HolderIdentity == "" || r.HolderIdentity == id {
		return reading{verdict: leaseFree}
	}
	h, err := parseHolder([]byte(l.Annotations[HolderAnnotation]))
	if err != nil || h.ID != r.HolderIdentity {
		// Not ours, or left over from an earlier holder.
		h = Holder{ID: r.HolderIdentity}
	}
	if h.Since.IsZero() {
		h.Since = r.AcquireTime.Time
	}
	renewed := r.RenewTime.Time
	if renewed.IsZero() {
		renewed = r.AcquireTime.Time
	}
	seen := observation{holder: r.HolderIdentity, renew: renewed, at: now}
	if last.holder == seen.holder && last.renew.Equal(seen.renew) && !last.at.IsZero() {
		seen.at = last.at
	}
	duration := time.Duration(r.LeaseDurationSeconds) * time.Second
	rd := reading{verdict: leaseHeld, holder: h, seen: seen, expires: seen.at.Add(duration),
		stale: !renewed.Add(duration).After(now)}
	switch {
	case m.Gone(h):
		rd.verdict = leaseGone
	case !now.Before(rd.expires):
		rd.verdict = leaseExpired
	}
	return rd
}

// readLease reads the Lease name (nil when there is none), waiting at most
// timeout for the answer.
func readLease(ctx context.Context, leases coordinationv1client.LeaseInterface, name string, timeout time.Duration) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return l, err
}

// take writes id as the holder of the Lease name, with annotation, over l
// as read (nil: create it): it fails with a conflict if l changed since.
func take(ctx context.Context, leases coordinationv1client.LeaseInterface, l *coordinationv1.Lease, name, id, annotation string, t LeaseTiming, now time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, t.RenewDeadline)
	defer cancel()
	rec := resourcelock.LeaderElectionRecord{
		HolderIdentity:       id,
		LeaseDurationSeconds: int(t.Duration / time.Second),
		AcquireTime:          metav1.NewTime(now),
		RenewTime:            metav1.NewTime(now),
	}
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}
	} else {
		l = l.DeepCopy()
		rec.LeaderTransitions = resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec).LeaderTransitions + 1
	}
	l.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(&rec)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[HolderAnnotation] = annotation
	var err error
	if l.ResourceVersion == "" {
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	return err
}

// errNotConfirmed: the lease taken could not be renewed in time; someone
// else may have taken it meanwhile.
var errNotConfirmed = errors.New("the lease taken was not renewed in time")

// hold renews the Lease namespace/name, which id has just taken, in the
// background, and returns once the first renewal went through (see Lease
// for held and release); errNotConfirmed if it did not within the renew
// deadline, the lease then given up if it is still id's.
func hold(ctx context.Context, client kubernetes.Interface, namespace, name, id, annotation string, t LeaseTiming) (held context.Context, release func(), err error) {
	desc := fmt.Sprintf("lease %s/%s", namespace, name)
	leases := client.CoordinationV1().Leases(namespace)
	acquired := make(chan context.Context, 1)
	le, err := newElector(client, namespace, name, id, annotation, nil, nil, t, func(lctx context.Context) {
		acquired <- lctx
	})
	if err != nil {
		return nil, nil, err
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
		_ = releaseLease(releaseCtx, leases, name, id)
	}
	deadline := time.NewTimer(t.RenewDeadline)
	defer deadline.Stop()
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
		return nil, nil, context.Cause(ctx)
	case <-deadline.C:
		giveUp()
		return nil, nil, errNotConfirmed
	}
}

// reported rate-limits LeaseOptions.Waiting.
type reported struct {
	holder string
	at     time.Time
}

// tell calls waiting with e when the holder changed since the last call,
// or WaitReportInterval has passed.
func (r *reported) tell(waiting func(*HeldError), e *HeldError, now time.Time) {
	if waiting == nil || e == nil {
		return
	}
	if e.Holder.ID == r.holder && !r.at.IsZero() && now.Sub(r.at) < WaitReportInterval {
		return
	}
	r.holder, r.at = e.Holder.ID, now
	waiting(e)
}

// pause waits d, and reports false when ctx ended first.
func pause(ctx context.Context, d time.Duration) bool {
	return ctxwait.Sleep(ctx, d) == nil
}

// stopWaiting is the error of a Lease whose ctx ended, with the holder last
// seen if any.
func stopWaiting(ctx context.Context, desc string, held *HeldError) error {
	err := fmt.Errorf("stop waiting for %s: %w", desc, context.Cause(ctx))
	if held != nil {
		err = fmt.Errorf("%w: %w", err, held)
	}
	return err
}

// noAnswer reports whether err says that no answer came from the API
// server: it could not be reached, or did not answer in time. An answer of
// any kind (a status, a server certificate that does not verify, a TLS
// alert) is one.
func noAnswer(err error) bool {
	var status apierrors.APIStatus
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	if errors.As(err, &status) || errors.As(err, &verify) || errors.As(err, &alert) {
		return false
	}
	var urlErr *url.Error
	var netErr net.Error
	return errors.As(err, &urlErr) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded)
}

// transient reports whether err may go away by itself: no answer, the
// API server busy or failing (apiretry.Passes, and any 500), or the
// Lease's namespace not there yet (an API server creates kube-system as it
// starts: a new cluster's first API server answers a moment before).
func transient(err error) bool {
	return noAnswer(err) || apiretry.Passes(err) || apierrors.IsInternalError(err) || namespaceMissing(err)
}

// namespaceMissing reports whether err says that a namespace is not found.
func namespaceMissing(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// newElector returns a leader elector on the Lease namespace/name for id,
// writing annotation as HolderAnnotation while id holds it, and labels and
// annotations (may be nil) with every write. It never gives
// the lease up by itself (no ReleaseOnCancel: client-go would release it
// before the work's context is cancelled); callers use releaseLease once
// the work is over.
func newElector(client kubernetes.Interface, namespace, name, id, annotation string, labels, annotations map[string]string, t LeaseTiming, started func(context.Context)) (*leaderelection.LeaderElector, error) {
	if t.Duration < time.Second {
		return nil, fmt.Errorf("lease duration %s is under a second, which a Lease cannot record: make it at least 1s", t.Duration)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     annotatingLeases{LeasesGetter: client.CoordinationV1(), id: id, annotation: annotation, extra: annotations},
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		Labels:     labels,
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
	extra      map[string]string
}

// Leases returns the annotating client of the Leases of namespace.
func (a annotatingLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return annotatingLeaseClient{LeaseInterface: a.LeasesGetter.Leases(namespace), id: a.id, annotation: a.annotation, extra: a.extra}
}

// annotatingLeaseClient sets or clears HolderAnnotation on Create and
// Update, the only writes resourcelock.LeaseLock makes.
type annotatingLeaseClient struct {
	coordinationv1client.LeaseInterface
	id         string
	annotation string
	// extra are annotations set on every write, whoever holds the lease.
	extra map[string]string
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
// removed otherwise, and c.extra set.
func (c annotatingLeaseClient) annotate(l *coordinationv1.Lease) *coordinationv1.Lease {
	l = l.DeepCopy()
	if len(c.extra) > 0 && l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	for k, v := range c.extra {
		l.Annotations[k] = v
	}
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
