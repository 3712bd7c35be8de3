package lock

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Elector runs work on one replica of `rigger serve` at a time: the one
// holding the Lease namespace/name. Make one with NewElector; IsLeader may
// be called at any time from any goroutine (serve's /readyz).
type Elector struct {
	client    kubernetes.Interface
	namespace string
	name      string
	id        string
	timing    LeaseTiming
	log       *slog.Logger
	opts      ElectorOptions

	leading atomic.Bool
}

// NewElector returns an Elector for the replica id (unique among the
// replicas, e.g. the pod name) on the Lease namespace/name in the cluster of
// client. A zero field of t takes its default; log receives the elector's
// transitions and client-go's leader election messages.
func NewElector(client kubernetes.Interface, namespace, name, id string, t LeaseTiming, log *slog.Logger) *Elector {
	return &Elector{client: client, namespace: namespace, name: name, id: id, timing: t.withDefaults(), log: log}
}

// ElectorOptions are the choices of NewElectorWith.
type ElectorOptions struct {
	// Labels are set on the Lease, so that Leases of one kind can be
	// listed (the replicas of serve, the Leases of its clusters).
	Labels map[string]string
	// Annotations are set on the Lease besides HolderAnnotation, e.g.
	// what it guards, for people.
	Annotations map[string]string
	// Address and AgentAddress are recorded in the Holder.
	Address, AgentAddress string
	// Command is the Holder's command ("serve" when empty).
	Command string
}

// NewElectorWith is NewElector with the Lease's labels, annotations and the
// holder's address of o.
func NewElectorWith(client kubernetes.Interface, namespace, name, id string, o ElectorOptions, t LeaseTiming, log *slog.Logger) *Elector {
	e := NewElector(client, namespace, name, id, t, log)
	e.opts = o
	return e
}

// IsLeader reports whether this replica holds the lease and runs its work.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Run campaigns for the lease until ctx ends. While this replica holds it,
// run runs with a context that is cancelled when the lease is lost; once run
// has returned, the lease is given up if it is still ours and the replica
// campaigns again; so it does when run returns by itself. run never runs
// twice at once, here or (lease timing permitting) on another replica. Run
// returns nil when ctx ends, and an error only when the elector cannot
// start (bad timing).
func (e *Elector) Run(ctx context.Context, run func(ctx context.Context)) error {
	desc := fmt.Sprintf("lease %s/%s", e.namespace, e.name)
	log := e.log.With("lease", e.namespace+"/"+e.name, "id", e.id)
	klogCtx := klog.NewContext(ctx, logr.FromSlogHandler(log.Handler()))
	command := e.opts.Command
	if command == "" {
		command = "serve"
	}
	me := Me(command, e.timing.Now())
	me.ID, me.Since, me.Address, me.AgentAddress = e.id, time.Time{}, e.opts.Address, e.opts.AgentAddress // since: when it leads, the Lease says
	annotation, err := json.Marshal(me)
	if err != nil {
		return fmt.Errorf("encode the holder of %s: %w", desc, err)
	}
	for ctx.Err() == nil {
		if err := e.term(klogCtx, string(annotation), run, log); err != nil {
			return fmt.Errorf("campaign for %s: %w", desc, err)
		}
	}
	return nil
}

// term campaigns once, runs run while leading, and returns when
// leadership is lost or ctx ends, run has returned and the lease is given
// up.
func (e *Elector) term(ctx context.Context, annotation string, run func(ctx context.Context), log *slog.Logger) error {
	var (
		mu      sync.Mutex
		over    bool // the term is over: a late start must not run
		running sync.WaitGroup
	)
	termCtx, endTerm := context.WithCancel(ctx)
	defer endTerm()
	le, err := newElector(e.client, e.namespace, e.name, e.id, annotation, e.opts.Labels, e.opts.Annotations, e.timing, func(lctx context.Context) {
		mu.Lock()
		if over {
			mu.Unlock()
			return
		}
		running.Add(1)
		e.leading.Store(true)
		mu.Unlock()
		defer running.Done()
		log.Info("leading: running")
		run(lctx)
		endTerm() // run gave up by itself: so does this term
	})
	if err != nil {
		return err
	}
	le.Run(termCtx) // returns when leadership is lost, run returned or ctx ends
	mu.Lock()
	over = true
	mu.Unlock()
	wasLeading := e.leading.Swap(false)
	running.Wait()
	if wasLeading {
		log.Info("stopped leading", "reason", stopReason(ctx))
	}
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.timing.RenewDeadline)
	defer cancel()
	if err := releaseLease(releaseCtx, e.client.CoordinationV1().Leases(e.namespace), e.name, e.id); err != nil {
		log.Warn("give up the lease; it expires by itself", "reason", err.Error(), "after", e.timing.Duration.String())
	}
	if ctx.Err() == nil {
		// Do not hammer the API server if it keeps failing us.
		t := time.NewTimer(e.timing.RetryPeriod)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return nil
}

// stopReason says why a term ended, for the log.
func stopReason(ctx context.Context) string {
	if ctx.Err() != nil {
		return "shutting down"
	}
	return "lease lost or work ended"
}

// RunLeader is NewElector(client, namespace, name, id, t, log).Run(ctx, run)
// for callers that need not know whether they lead.
func RunLeader(ctx context.Context, client kubernetes.Interface, namespace, name, id string, t LeaseTiming, run func(ctx context.Context), log *slog.Logger) error {
	return NewElector(client, namespace, name, id, t, log).Run(ctx, run)
}
