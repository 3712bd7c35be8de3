package execute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/plan"
)

// upWatch is the watch of one container a step started: whether it stays
// up (dockerop.WaitUp). err is set before done is closed.
type upWatch struct {
	node, component string
	engine          dockerop.Engine
	done            chan struct{}
	// err is the watch's failure, run the run that stayed up, both set
	// before done is closed.
	err    error
	run    dockerop.UpRun
	began  time.Time
	cancel context.CancelFunc
	// count is closed (by arm) when waitHealthy comes to the component:
	// the components before it on the node are healthy, and its restarts
	// count from then on (dockerop.Up.Count).
	count   chan struct{}
	armOnce sync.Once
	// held is closed once the container has run dockerop.Hold in a row
	// with its restarts counted (dockerop.Up.Held).
	held     chan struct{}
	heldOnce sync.Once
	// said is set (under runner.mu) once the watch's failure was said and
	// returned: a failure stops the run once.
	said bool
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

// waitHeld returns once the container has held (nil) or the watch has a
// result (its result), or ctx's error.
func (w *upWatch) waitHeld(ctx context.Context) error {
	select {
	case <-w.held:
		return nil
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// untilCrash returns ctx, canceled too when w (if any) finds its container
// in a crash loop: what waits on the component (a probe, an etcd
// promotion) stops then, and the crash loop is why.
func (w *upWatch) untilCrash(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if w != nil {
		go func() {
			select {
			case <-w.done:
				if w.err != nil {
					cancel()
				}
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
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
// The watch outlives the step and its node's turn: waitHealthy lets the
// node go on once the container has held (dockerop.Hold), and the watch
// goes on to MinUptime while the run goes on. Its failure stops the run
// at the next batch or phase (failedWatch), and the run ends only once
// every watch has its result (settle), or stops them (stopWatches).
func (r *runner) watchUp(ctx context.Context, e dockerop.Engine, s plan.Step) {
	if r.o.Desired != nil {
		if dn, ok := r.o.Desired.Node(s.Node); ok {
			if dc, ok := dn.Container(s.Component); ok && dc.RunOnce {
				return
			}
		}
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &upWatch{node: s.Node, component: s.Component, engine: e, began: r.o.Now(), done: make(chan struct{}), cancel: cancel,
		count: make(chan struct{}), held: make(chan struct{})}
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
		w.run, w.err = dockerop.WaitUp(wctx, e, s.Node, s.Component, dockerop.Up{
			MinUptime: r.o.MinUptime, Timeout: r.o.HealthTimeout, Count: w.count,
			Held: func() { w.heldOnce.Do(func() { close(w.held) }) },
		})
	}()
}

// healthyFrom counts w's restarts from the container's run when its health
// check passed, when Docker restarted it after it had stayed up MinUptime
// (WaitUp's run) and before that: a component that exits while it starts
// and then comes up healthy is not in a crash loop (a new API server
// whose bootstrap times out on a slow etcd exits, twice in a cold
// converge on a loaded machine); the restarts after its health count as
// before (settle's StillUp). Said when it moves the count.
func (r *runner) healthyFrom(ctx context.Context, w *upWatch) {
	if err, done := w.result(); !done || err != nil {
		return
	}
	c, err := w.engine.ContainerInspect(ctx, w.component)
	if err != nil || c.ContainerJSONBase == nil || c.State == nil || !c.State.Running || c.State.Restarting {
		return
	}
	r.mu.Lock()
	before := c.RestartCount - w.run.Restarts
	if before > 0 {
		w.run = dockerop.UpRun{StartedAt: c.State.StartedAt, Restarts: c.RestartCount}
	}
	r.mu.Unlock()
	if before > 0 {
		r.say(w.node, fmt.Sprintf("%s was restarted %d time(s) by Docker after it had run %s and before it was healthy: its restarts count from its health on",
			w.component, before, r.o.MinUptime), nil)
	}
}

// watch returns the watch of a container of node the run started, or nil.
func (r *runner) watch(node, component string) *upWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up[stepKey{node, component}]
}

// watches returns the run's watches, of nodes only when nodes is not nil,
// in a fixed order (node, then component).
func (r *runner) watches(nodes []string) []*upWatch {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*upWatch
	for _, w := range r.up {
		if nodes == nil || slices.Contains(nodes, w.node) {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b *upWatch) int {
		return cmp.Or(strings.Compare(a.node, b.node), strings.Compare(a.component, b.component))
	})
	return out
}

// fail says and returns w's failure, once: nil when it has none or it was
// returned already.
func (r *runner) fail(w *upWatch) error {
	err, done := w.result()
	if !done || err == nil {
		return nil
	}
	r.mu.Lock()
	said := w.said
	w.said = true
	r.mu.Unlock()
	if said {
		return nil
	}
	r.say(w.node, w.component+" did not stay up", err)
	return err
}

// failedWatch returns the failure of a watch that has ended (the first,
// in watches' order), so that a container that stopped after its node's
// turn stops the run before the next batch or phase.
func (r *runner) failedWatch() error {
	for _, w := range r.watches(nil) {
		if err := r.fail(w); err != nil {
			return err
		}
	}
	return nil
}

// settleNodes waits until every watch of nodes (all when nil) has its
// result, and returns their failures.
func (r *runner) settleNodes(ctx context.Context, nodes []string) error {
	var errs []error
	for _, w := range r.watches(nodes) {
		if err := w.wait(ctx); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		errs = append(errs, r.fail(w))
	}
	return errors.Join(errs...)
}

// settle waits, at the end of a run that succeeded so far, until every
// container the run started has run MinUptime (or failed), and then checks
// each once more (dockerop.StillUp): one that stopped since, or that Docker
// restarted more than once since (a component that crashes every half
// minute, in a run that went on a minute longer), fails the run; one
// restart is said. The run succeeds only then.
func (r *runner) settle(ctx context.Context) error {
	ws := r.watches(nil)
	if len(ws) == 0 {
		return nil
	}
	end := r.o.Timeline.Begin("apply: the started containers up " + r.o.MinUptime.String())
	defer end()
	if err := r.settleNodes(ctx, nil); err != nil {
		return err
	}
	return fanout.Each(ctx, ws, r.o.MaxParallel, func(ctx context.Context, _ int, w *upWatch) error {
		r.mu.Lock()
		run := w.run
		r.mu.Unlock()
		restarted, err := dockerop.StillUp(ctx, w.engine, w.node, w.component, run, w.began)
		switch {
		case err != nil:
			r.say(w.node, w.component+" still up", err)
		case restarted:
			r.say(w.node, w.component+" restarted once after it had stayed up "+r.o.MinUptime.String()+
				" (Docker started it again; once is not a crash loop: docker logs "+w.component+" on the node says why it exited)", nil)
		}
		return err
	})
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
