package dockerop

import (
	"cmp"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/errdefs"
	"github.com/docker/docker/pkg/stdcopy"
)

// inspectEngine is an engine whose container goes through states: each
// inspection returns the next one (the last one ever after). Its logs are
// logs.
type inspectEngine struct {
	Engine
	mu     sync.Mutex
	states []container.InspectResponse
	calls  int
	logs   string
}

func (e *inspectEngine) ContainerInspect(context.Context, string) (container.InspectResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := min(e.calls, len(e.states)-1)
	e.calls++
	if e.states[i].ContainerJSONBase == nil {
		return container.InspectResponse{}, errdefs.NotFound(errors.New("no such container"))
	}
	return e.states[i], nil
}

func (e *inspectEngine) ContainerLogs(context.Context, string, container.LogsOptions) (io.ReadCloser, error) {
	var b strings.Builder
	w := stdcopy.NewStdWriter(&b, stdcopy.Stderr)
	_, _ = w.Write([]byte(e.logs))
	return io.NopCloser(strings.NewReader(b.String())), nil
}

// state is an inspection of a container started at started (a run's
// identity) with restarts restarts, in Docker's state status.
func state(status container.ContainerState, restarts, exit int, started string) container.InspectResponse {
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		RestartCount: restarts,
		HostConfig:   &container.HostConfig{RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyAlways}},
		State: &container.State{Status: status, Running: status == container.StateRunning || status == container.StateRestarting,
			Restarting: status == container.StateRestarting, ExitCode: exit, StartedAt: started},
	}}
}

func TestWaitUp(t *testing.T) {
	const (
		running    = container.StateRunning
		restarting = container.StateRestarting
		exited     = container.StateExited
	)
	tests := []struct {
		name   string
		states []container.InspectResponse
		// want is "" for success, or what the error says.
		want []string
		// took is how long WaitUp took, to the poll.
		took time.Duration
		// timeout is WaitUp's (a minute when 0).
		timeout time.Duration
		// count, when set, is when the count of restarts begins (Up.Count).
		count time.Duration
	}{
		{
			name:   "stays up",
			states: []container.InspectResponse{state(running, 0, 0, "t1")},
			took:   MinUptime,
		},
		{
			name: "restarts once while what it needs comes up, then stays up",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(restarting, 1, 1, "t1"), state(running, 1, 0, "t2"),
			},
			took: MinUptime + 2*upPoll,
		},
		{
			name: "crash loop seen restarting",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(restarting, 1, 1, "t1"), state(running, 1, 0, "t2"),
				state(running, 2, 0, "t3"), state(restarting, 4, 1, "t3"), state(running, 4, 0, "t4"),
				state(restarting, 7, 1, "t4"),
			},
			want: []string{"node n1: kube-scheduler does not stay up: exited with code 1, and Docker restarted it 7 times since rigger started it; now restarting",
				"last lines of kube-scheduler on n1:\nbind: address already in use"},
			took: 6 * upPoll,
		},
		{
			// Running at every inspection, restarted in between: the
			// restart count says so.
			name: "crash loop between inspections",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(running, 2, 0, "t2"), state(running, 7, 0, "t3"),
			},
			want: []string{"kube-scheduler does not stay up: exited (its exit code was not seen), and Docker restarted it 7 times since rigger started it; now running: its last lines say why"},
			took: 2 * upPoll,
		},
		{
			name: "restarts a few times between inspections, then stays up",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(running, 2, 0, "t2"), state(running, 6, 0, "t3"),
			},
			took: MinUptime + 2*upPoll,
		},
		{
			name: "never stays up long enough",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(restarting, 1, 1, "t1"), state(running, 1, 0, "t2"),
				state(restarting, 2, 137, "t2"), state(running, 2, 0, "t3"),
			},
			want:    []string{"exited with code 137, and Docker restarted it twice since rigger started it; now running"},
			took:    9 * time.Second,
			timeout: 9 * time.Second,
		},
		{
			// Restarted over and over while it waits for what it needs;
			// then that is there, and it stays up.
			name: "restarts before the count begins",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(restarting, 3, 1, "t1"), state(running, 5, 0, "t2"),
				state(restarting, 8, 1, "t2"), state(running, 8, 0, "t3"),
			},
			count: 1900 * time.Millisecond,
			took:  4*upPoll + MinUptime,
		},
		{
			// Up 10 s before what it needs was there: not counted as up
			// until the count begins (it may exit once it finds out).
			name:   "up before the count begins",
			states: []container.InspectResponse{state(running, 0, 0, "t1")},
			count:  15*time.Second + 100*time.Millisecond,
			took:   15*time.Second + upPoll,
		},
		{
			name: "a crash loop after the count began",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(restarting, 3, 1, "t1"), state(running, 5, 0, "t2"),
				state(restarting, 8, 1, "t2"), state(running, 10, 0, "t3"), state(restarting, 15, 1, "t3"),
				state(restarting, 17, 1, "t3"),
			},
			count: 1900 * time.Millisecond,
			want:  []string{"exited with code 1, and Docker restarted it 15 times since rigger started it; now restarting"},
			took:  5 * upPoll,
		},
		{
			// Docker's back-off doubles with each restart: from the 8th
			// on, each takes 13 s more. Two restarts after the count
			// began, with more than maxRestarts before, are the crash loop.
			name: "a crash loop that began before the count",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(restarting, 3, 1, "t1"), state(running, 5, 0, "t2"),
				state(restarting, 8, 1, "t2"), state(running, 9, 0, "t3"), state(restarting, 10, 1, "t3"),
			},
			count: 1400 * time.Millisecond,
			want:  []string{"exited with code 1, and Docker restarted it 10 times since rigger started it; now restarting"},
			took:  5 * upPoll,
		},
		{
			// The restart Docker had scheduled when the count began,
			// then up.
			name: "restarted once after many before the count",
			states: []container.InspectResponse{
				state(running, 0, 0, "t1"), state(restarting, 3, 1, "t1"), state(running, 5, 0, "t2"),
				state(restarting, 8, 1, "t2"), state(running, 9, 0, "t3"),
			},
			count: 1400 * time.Millisecond,
			took:  4*upPoll + MinUptime,
		},
		{
			name:   "exited for good",
			states: []container.InspectResponse{state(running, 0, 0, "t1"), state(exited, 0, 2, "t1")},
			want:   []string{"exited with code 2 500ms after rigger started it, and its restart policy (\"always\") does not start it again; now exited"},
			took:   upPoll,
		},
		{
			name:   "removed meanwhile",
			states: []container.InspectResponse{state(running, 0, 0, "t1"), {}},
			want:   []string{"node n1: container kube-scheduler is gone"},
			took:   upPoll,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := &inspectEngine{states: tc.states, logs: "bind: address already in use\n"}
				began := time.Now()
				u := Up{Timeout: cmp.Or(tc.timeout, time.Minute)}
				if tc.count > 0 {
					count := make(chan struct{})
					time.AfterFunc(tc.count, func() { close(count) })
					u.Count = count
				}
				_, err := WaitUp(t.Context(), e, "n1", "kube-scheduler", u)
				took := time.Since(began)
				if len(tc.want) == 0 && err != nil {
					t.Fatalf("error %v, want none", err)
				}
				for _, w := range tc.want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("error %v\nwant it to hold %q", err, w)
					}
				}
				var crash *CrashLoopError
				if strings.Contains(tc.name, "crash") && !errors.As(err, &crash) {
					t.Errorf("error %T, want a *CrashLoopError", err)
				}
				if took != tc.took {
					t.Errorf("took %s, want %s", took, tc.took)
				}
			})
		})
	}
}

// TestWaitUpCanceled: the caller's end is its error, not a crash loop.
func TestWaitUpCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		e := &inspectEngine{states: []container.InspectResponse{state(container.StateRunning, 0, 0, "t1")}}
		if _, err := WaitUp(ctx, e, "n1", "etcd", Up{Timeout: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want the context's", err)
		}
	})
}

func TestStillUp(t *testing.T) {
	const (
		running    = container.StateRunning
		restarting = container.StateRestarting
		exited     = container.StateExited
	)
	run := UpRun{StartedAt: "t1", Restarts: 2}
	for _, tc := range []struct {
		name      string
		state     container.InspectResponse
		restarted bool
		want      string // in the error; "" for none
	}{
		{name: "as it was", state: state(running, 2, 0, "t1")},
		{name: "restarted once", state: state(running, 3, 0, "t2"), restarted: true},
		{name: "restarting once", state: state(restarting, 3, 1, "t1"), restarted: true},
		{name: "started again by hand", state: state(running, 0, 0, "t2"), restarted: true},
		{
			name:  "restarted twice",
			state: state(running, 4, 0, "t3"),
			want:  "node n1: kube-scheduler does not stay up: exited (its exit code was not seen) after it had run 10s, and Docker restarted it twice since; now running: its last lines say why",
		},
		{
			name:  "restarting the third time",
			state: state(restarting, 5, 137, "t3"),
			want:  "exited with code 137 after it had run 10s, and Docker restarted it 3 times since; now restarting",
		},
		{
			name:  "stopped",
			state: state(exited, 2, 2, "t1"),
			want:  "exited with code 2 after it had run 10s; now exited",
		},
		{name: "gone", state: container.InspectResponse{}, want: "node n1: container kube-scheduler is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &inspectEngine{states: []container.InspectResponse{tc.state}, logs: "bind: address already in use\n"}
			restarted, err := StillUp(t.Context(), e, "n1", "kube-scheduler", run, time.Now())
			if tc.want == "" {
				if err != nil || restarted != tc.restarted {
					t.Fatalf("restarted %v, error %v; want %v, none", restarted, err, tc.restarted)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant it to hold %q", err, tc.want)
			}
		})
	}
}
