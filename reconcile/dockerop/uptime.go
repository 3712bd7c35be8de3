package dockerop

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
)

// MinUptime is how long a component container must run without a restart
// for WaitUp to count its start as a success: Docker's own measure (its
// restart manager resets a container's back-off once it has run 10 s).
const MinUptime = 10 * time.Second

// Hold is how long a component container must have run in a row, with its
// restarts counted, before WaitUp calls Up.Held: long enough for what
// fails at start (a flag refused, a port in use, a file that does not
// parse) to have failed, a few of WaitUp's inspections. Those that fail
// later are found by the watch that goes on to MinUptime.
const Hold = 2 * time.Second

// Timing of WaitUp.
const (
	// upPoll is the pause between two inspections of the container.
	upPoll = 500 * time.Millisecond
	// maxRestarts is how many times Docker may restart a container WaitUp
	// waits for before it calls it a crash loop: a component may exit a
	// few times while what it needs comes up (its restart policy is there
	// for that), but not over and over. Docker waits 0.1 s before the
	// first restart and twice as long each time: a component that exits at
	// once restarts the seventh time about 13 s after it started.
	maxRestarts = 6
	// lateRestarts is how many of those restarts must come after the count
	// began (Up.Count): one may be the restart Docker had scheduled before
	// what the container needs was up, the second is a failure with it up.
	// Not maxRestarts more: Docker's back-off doubles with each restart,
	// and an etcd member that cannot start, counted from its 5th restart,
	// took 3 minutes to restart 6 more times.
	lateRestarts = 2
	// logsTimeout bounds the reading of a failed container's last lines.
	logsTimeout = 10 * time.Second
)

// Up says what WaitUp waits for.
type Up struct {
	// MinUptime is how long the container must run without a restart
	// (MinUptime when 0), and Timeout how long WaitUp waits for that.
	MinUptime, Timeout time.Duration
	// Count, when not nil, holds back the count of restarts until it is
	// closed: the restarts before are the component's wait for what it
	// needs (the controller manager exits until its API server answers),
	// which its restart policy is there for. Those after count from the
	// first inspection after Count closed. nil counts from the start.
	Count <-chan struct{}
	// Held, when set, is called once the container has run Hold in a row
	// with its restarts counted: the caller may go on while WaitUp watches
	// on to MinUptime.
	Held func()
}

// UpRun is one run of a container, as Docker's inspection tells it: when it
// started and how many times Docker had restarted the container by then.
type UpRun struct {
	StartedAt string
	Restarts  int
}

// WaitUp waits until the container name, which rigger has just started,
// has run u.MinUptime without a restart, inspecting it every half second,
// and returns that run (to check later that it goes on: StillUp).
// It fails with a *CrashLoopError as soon as the container is seen stopped
// for good (exited or dead: its restart policy does not start it again),
// or restarted over and over (counted as u.Count says: crashLoop); and
// when u.Timeout passes before it stayed up, with a *CrashLoopError if it
// was seen stopped or restarted meanwhile.
//
// A container that restarts is running at one instant and restarting the
// next: every inspection reads its restart count, which Docker counts from
// the container's last start through the API (the one rigger just made),
// and its start time, so a restart between two inspections counts too.
func WaitUp(ctx context.Context, e Engine, node, name string, u Up) (UpRun, error) {
	began := time.Now()
	minUptime := cmp.Or(u.MinUptime, MinUptime)
	waitCtx, cancel := context.WithTimeout(ctx, u.Timeout)
	defer cancel()
	tick := time.NewTicker(upPoll)
	defer tick.Stop()
	var (
		startedAt string    // State.StartedAt of the current run
		upSince   time.Time // when the current run was first seen running
		counting  = u.Count == nil
		base      int // RestartCount when the count began
		crash     = &CrashLoopError{Node: node, Container: name, ExitCode: -1}
		lastErr   error
		held      = u.Held
	)
	for {
		c, err := e.ContainerInspect(waitCtx, name)
		switch {
		case err != nil && errdefs.IsNotFound(err):
			return UpRun{}, fmt.Errorf("node %s: container %s is gone (removed while rigger waited for it to stay up)", node, name)
		case err != nil:
			lastErr = err
		case c.ContainerJSONBase == nil || c.State == nil:
			lastErr = errors.New("the engine gave no state")
		default:
			lastErr = nil
			s := c.State
			crash.Restarts = c.RestartCount
			if !counting && closed(u.Count) {
				counting, base = true, c.RestartCount
			}
			crash.Policy = ""
			if c.HostConfig != nil {
				crash.Policy = string(c.HostConfig.RestartPolicy.Name)
			}
			if s.StartedAt != startedAt {
				startedAt, upSince = s.StartedAt, time.Time{}
			}
			stopped := !s.Running || s.Restarting
			crash.State = string(s.Status)
			if stopped {
				crash.ExitCode, crash.OOMKilled, crash.EngineError = s.ExitCode, s.OOMKilled, s.Error
				upSince = time.Time{}
			}
			if stopped && !s.Restarting || counting && crashLoop(c.RestartCount, base) {
				crash.Took = time.Since(began)
				return UpRun{}, crash.withLogs(ctx, e)
			}
			if stopped {
				break
			}
			if upSince.IsZero() {
				upSince = time.Now()
			}
			if counting && time.Since(upSince) >= minUptime {
				return UpRun{StartedAt: s.StartedAt, Restarts: c.RestartCount}, nil
			}
			if held != nil && counting && time.Since(upSince) >= min(Hold, minUptime) {
				held()
				held = nil
			}
		}
		select {
		case <-waitCtx.Done():
			if ctx.Err() != nil {
				return UpRun{}, ctx.Err()
			}
			if crash.Restarts > 0 || crash.ExitCode >= 0 {
				crash.Took = time.Since(began)
				return UpRun{}, crash.withLogs(ctx, e)
			}
			if lastErr != nil {
				return UpRun{}, fmt.Errorf("node %s: container %s: not seen running for %s in %s: inspect: %w", node, name, minUptime, u.Timeout, lastErr)
			}
			return UpRun{}, fmt.Errorf("node %s: container %s did not run %s in a row in %s", node, name, minUptime, u.Timeout)
		case <-tick.C:
		}
	}
}

// StillUp checks, with one inspection, that the container name still
// runs as WaitUp left it (run). A container that stopped for good since,
// or that Docker restarted more than once since (a component that crashes
// every half minute, in an apply that went on a minute longer), fails with
// a *CrashLoopError. One restart is not a crash loop: a controller manager
// or a scheduler exits by design when it loses its leader election, and
// Docker starts it again; restarted is then set, for the caller to say.
func StillUp(ctx context.Context, e Engine, node, name string, run UpRun, since time.Time) (restarted bool, err error) {
	c, err := e.ContainerInspect(ctx, name)
	switch {
	case err != nil && errdefs.IsNotFound(err):
		return false, fmt.Errorf("node %s: container %s is gone (removed after it had stayed up %s)", node, name, MinUptime)
	case err != nil:
		return false, fmt.Errorf("node %s: inspect container %s: %w", node, name, err)
	case c.ContainerJSONBase == nil || c.State == nil:
		return false, fmt.Errorf("node %s: inspect container %s: the engine gave no state", node, name)
	}
	s := c.State
	restarts := c.RestartCount - run.Restarts
	stopped := !s.Running && !s.Restarting
	if !stopped && restarts <= 1 {
		return restarts == 1 || s.StartedAt != run.StartedAt, nil
	}
	crash := &CrashLoopError{Node: node, Container: name, ExitCode: -1, EngineError: s.Error,
		State: string(s.Status), Restarts: restarts, Took: time.Since(since), Late: true}
	if !s.Running || s.Restarting {
		// Docker keeps the exit code until the container runs again.
		crash.ExitCode, crash.OOMKilled = s.ExitCode, s.OOMKilled
	}
	if c.HostConfig != nil {
		crash.Policy = string(c.HostConfig.RestartPolicy.Name)
	}
	return false, crash.withLogs(ctx, e)
}

// crashLoop says whether a container Docker has restarted restarts times
// since rigger started it, base of them before the count of its restarts
// began, is in a crash loop: more than maxRestarts in all, lateRestarts of
// them since the count began.
func crashLoop(restarts, base int) bool {
	return restarts > maxRestarts && restarts-base >= lateRestarts
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// CrashLoopError is a component container that did not stay up after
// rigger started it: Docker restarted it over and over, or it stopped.
type CrashLoopError struct {
	Node, Container string
	// State is Docker's state of the container when it was last seen
	// (running, restarting, exited, dead).
	State string
	// ExitCode is the exit code it was last seen stopped with, -1 when it
	// was never seen stopped; OOMKilled says the kernel killed it for
	// memory, and EngineError is the engine's error starting it, if any.
	ExitCode    int
	OOMKilled   bool
	EngineError string
	// Restarts is how many times Docker restarted it since rigger started
	// it; Took is how long it was watched; Policy is its restart policy.
	Restarts int
	Took     time.Duration
	Policy   string
	// Logs are its last lines, "" when they could not be read.
	Logs string
	// Late is set when it stopped after it had stayed up MinUptime
	// (StillUp): Restarts count from then.
	Late bool
}

func (e *CrashLoopError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s: %s does not stay up: ", e.Node, e.Container)
	switch {
	case e.ExitCode >= 0 && e.OOMKilled:
		fmt.Fprintf(&b, "killed for lack of memory (exit code %d)", e.ExitCode)
	case e.ExitCode >= 0:
		fmt.Fprintf(&b, "exited with code %d", e.ExitCode)
	default:
		b.WriteString("exited (its exit code was not seen)")
	}
	if e.EngineError != "" {
		fmt.Fprintf(&b, " (%s)", e.EngineError)
	}
	switch {
	case e.Late && e.Restarts > 0:
		fmt.Fprintf(&b, " after it had run %s, and Docker restarted it %s since", MinUptime, Times(e.Restarts))
	case e.Late:
		fmt.Fprintf(&b, " after it had run %s", MinUptime)
	case e.Restarts > 0:
		fmt.Fprintf(&b, ", and Docker restarted it %s since rigger started it", Times(e.Restarts))
	case e.State == string(container.StateExited) || e.State == string(container.StateDead):
		fmt.Fprintf(&b, " %s after rigger started it, and its restart policy (%q) does not start it again", e.Took.Round(100*time.Millisecond), e.Policy)
	}
	if e.State != "" {
		fmt.Fprintf(&b, "; now %s", e.State)
	}
	b.WriteString(": its last lines say why; fix that and apply again")
	if e.Logs != "" {
		fmt.Fprintf(&b, "\nlast lines of %s on %s:\n%s", e.Container, e.Node, e.Logs)
	}
	return b.String()
}

// Times is "once", "twice", "n times".
func Times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// withLogs returns e with the container's last lines, read even when ctx
// has ended, for at most logsTimeout.
func (e *CrashLoopError) withLogs(ctx context.Context, eng Engine) *CrashLoopError {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logsTimeout)
	defer cancel()
	e.Logs = Logs(ctx, eng, e.Container)
	return e
}
