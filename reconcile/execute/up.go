package execute

import (
	"context"
	"sync"

	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/plan"
)

// upWatch is the watch of one container a step started: whether it stays
// up (dockerop.WaitUp). err is set before done is closed.
type upWatch struct {
	done   chan struct{}
	err    error
	cancel context.CancelFunc
	// count is closed (by arm) when waitHealthy comes to the component:
	// the components before it on the node are healthy, and its restarts
	// count from then on (dockerop.Up.Count).
	count   chan struct{}
	armOnce sync.Once
}

// arm starts the count of the container's restarts.
func (w *upWatch) arm() { w.armOnce.Do(func() { close(w.count) }) }

// wait returns the watch's result once it has one, or ctx's error.
func (w *upWatch) wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// result returns the watch's result if it has one.
func (w *upWatch) result() (err error, done bool) {
	select {
	case <-w.done:
		return w.err, true
	default:
		return nil, false
	}
}

// watchUp starts watching the container step s has just started (created,
// replaced, restarted) until it has run Options.MinUptime without a
// restart, at most Options.HealthTimeout. It watches from the moment the
// container started, alongside the steps and health checks that follow, so
// that the uptime a component needs costs no time once it is healthy: a
// crash loop shows as restarts however late waitHealthy asks. Its restarts
// count only from when waitHealthy comes to it (upWatch.arm): until the
// components before it are healthy, a component may exit and be restarted
// by Docker while it waits for them (the controller manager for its API
// server: three or four times in a cold converge on the sandbox). A container
// that runs once by design (desired.Container.RunOnce) is not watched.
//
// The watch outlives the step's context (a phase's fan-out ends it) and
// ends with the run (stopWatches).
func (r *runner) watchUp(ctx context.Context, e dockerop.Engine, s plan.Step) {
	if r.o.Desired != nil {
		if dn, ok := r.o.Desired.Node(s.Node); ok {
			if dc, ok := dn.Container(s.Component); ok && dc.RunOnce {
				return
			}
		}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &upWatch{done: make(chan struct{}), cancel: cancel, count: make(chan struct{})}
	key := stepKey{s.Node, s.Component}
	r.mu.Lock()
	if r.up == nil {
		r.up = map[stepKey]*upWatch{}
	}
	if old := r.up[key]; old != nil {
		old.cancel() // the container it watched is gone
	}
	r.up[key] = w
	r.mu.Unlock()
	r.upWG.Add(1)
	go func() {
		defer r.upWG.Done()
		defer close(w.done)
		w.err = dockerop.WaitUp(wctx, e, s.Node, s.Component, dockerop.Up{MinUptime: r.o.MinUptime, Timeout: r.o.HealthTimeout, Count: w.count})
	}()
}

// watch returns the watch of a container of node the run started, or nil.
func (r *runner) watch(node, component string) *upWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up[stepKey{node, component}]
}

// stopWatches ends the watches still running and waits for them.
func (r *runner) stopWatches() {
	r.mu.Lock()
	for _, w := range r.up {
		w.cancel()
	}
	r.mu.Unlock()
	r.upWG.Wait()
}
