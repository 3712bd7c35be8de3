package execute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/plan"
)

// loopEngine is a node's engine whose containers restart as Docker's
// restart policy restarts a crashing one: each inspection of a container
// of crashing shows one restart more, seen alternately running and
// restarting with exit code 1. The others run.
type loopEngine struct {
	dockerop.Engine
	crashing map[string]bool
	// until, when set, is when the containers of crashing stop crashing
	// (and then run).
	until    time.Time
	mu       sync.Mutex
	inspects map[string]int
	events   []string
}

func (e *loopEngine) ContainerRestart(_ context.Context, name string, _ container.StopOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.events = append(e.events, "restart "+name)
	return nil
}

func (e *loopEngine) ContainerInspect(_ context.Context, name string) (container.InspectResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inspects == nil {
		e.inspects = map[string]int{}
	}
	n := e.inspects[name]
	e.inspects[name]++
	st := &container.State{Status: container.StateRunning, Running: true, StartedAt: "t0"}
	restarts := 0
	if e.crashing[name] && !e.until.IsZero() && !time.Now().Before(e.until) {
		restarts = e.inspects[name+" stopped"]
		if restarts == 0 {
			restarts = n
			e.inspects[name+" stopped"] = n
		}
		st.StartedAt = "up"
	} else if e.crashing[name] {
		restarts = n
		st.StartedAt = "t" + strings.Repeat("I", n)
		if n%2 == 1 {
			st.Status, st.Restarting, st.ExitCode = container.StateRestarting, true, 1
		}
	}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		RestartCount: restarts, State: st,
		HostConfig: &container.HostConfig{RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyAlways}},
	}}, nil
}

func (e *loopEngine) ContainerLogs(_ context.Context, name string, _ container.LogsOptions) (io.ReadCloser, error) {
	var b strings.Builder
	w := stdcopy.NewStdWriter(&b, stdcopy.Stderr)
	w.Write([]byte("E1128 run.go:72] " + name + ": failed to listen on 0.0.0.0:10259: bind: address already in use\n"))
	return io.NopCloser(strings.NewReader(b.String())), nil
}

// probes is a health check that answers healthy at once, or never (for
// the components of hang), until its context ends; or, for those of slow,
// after that long.
type probes struct {
	hang map[string]bool
	slow map[string]time.Duration
}

func (p probes) Wait(ctx context.Context, t health.Target, timeout time.Duration) error {
	if d := p.slow[t.Component]; d > 0 {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !p.hang[t.Component] {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	<-ctx.Done()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &health.UnhealthyError{Target: t, Waited: timeout, Err: errors.New("connection refused")}
	}
	return ctx.Err()
}

// TestCrashLoopFailsTheRun: a component whose container Docker restarts
// over and over after Run restarted it fails the run, naming the node,
// the component, its exit code and its last lines, whether its health
// check answers between two restarts or never; the steps after it do not
// run. One that stays up passes once it has run MinUptime, counted from
// its step (alongside the health checks).
func TestCrashLoopFailsTheRun(t *testing.T) {
	d := build(t, clusterYML)
	restart := func(node, component string) plan.Step {
		dn, _ := d.Node(node)
		dc, _ := dn.Container(component)
		return plan.Step{Node: node, Component: component, Action: plan.Restart, Phase: plan.PhaseControlPlane, After: dc, Reason: "test"}
	}
	p := &plan.Plan{ObservedAt: now, Steps: []plan.Step{
		restart("10.0.0.1", desired.KubeAPIServer), restart("10.0.0.1", desired.KubeScheduler),
		restart("10.0.0.2", desired.KubeScheduler),
	}}
	for _, tc := range []struct {
		name     string
		crashing map[string]bool
		hang     map[string]bool
		want     string // in the error; "" for none
		// took is how long Run took, at most.
		took time.Duration
	}{
		// One node at a time: the second once the first's components are
		// healthy and held; the run ends once the second's scheduler has
		// stayed up MinUptime.
		{name: "all stay up", took: dockerop.Hold + dockerop.MinUptime + time.Second},
		{
			name:     "a crash loop between healthy probes",
			crashing: map[string]bool{desired.KubeScheduler: true},
			want:     "node 10.0.0.1: kube-scheduler does not stay up: exited with code 1, and Docker restarted it ",
			// The API server's MinUptime, then the scheduler's restarts
			// counted.
			took: dockerop.MinUptime + 4*time.Second,
		},
		{
			name:     "a crash loop that never answers",
			crashing: map[string]bool{desired.KubeScheduler: true},
			hang:     map[string]bool{desired.KubeScheduler: true},
			want:     "node 10.0.0.1: kube-scheduler does not stay up: exited with code 1, and Docker restarted it ",
			// Not the health check's timeout.
			took: dockerop.MinUptime + 4*time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := &loopEngine{crashing: tc.crashing}
				o := Options{Desired: d, Health: probes{hang: tc.hang}, Budgets: plan.Budgets{WorkerBatch: 1}, Now: time.Now,
					Nodes: func(context.Context, string) (dockerop.Engine, error) { return e, nil }}
				began := time.Now()
				res, err := Run(t.Context(), p, o)
				took := time.Since(began)
				if took > tc.took {
					t.Errorf("Run took %s, want at most %s", took, tc.took)
				}
				if tc.want == "" {
					if err != nil || len(res.Done) != 3 {
						t.Fatalf("error %v, %d steps done; want all 3 done", err, len(res.Done))
					}
					if took < dockerop.Hold+dockerop.MinUptime {
						t.Errorf("Run took %s, less than Hold and MinUptime: the containers were not watched", took)
					}
					return
				}
				var crash *dockerop.CrashLoopError
				if !errors.As(err, &crash) || !strings.HasPrefix(err.Error(), tc.want) {
					t.Fatalf("error:\n%v\nwant a *CrashLoopError:\n%s", err, tc.want)
				}
				const logs = "\nlast lines of kube-scheduler on 10.0.0.1:\n" +
					"E1128 run.go:72] kube-scheduler: failed to listen on 0.0.0.0:10259: bind: address already in use"
				if !strings.HasSuffix(err.Error(), logs) {
					t.Errorf("error:\n%v\nwant it to end with the last lines:%s", err, logs)
				}
				if strings.Count(err.Error(), "last lines of") != 1 {
					t.Errorf("the last lines shown %d times:\n%v", strings.Count(err.Error(), "last lines of"), err)
				}
				if len(res.NotRun) != 1 || res.NotRun[0].Node != "10.0.0.2" {
					t.Errorf("not run %+v, want 10.0.0.2's step", res.NotRun)
				}
			})
		})
	}
}

// TestRestartsWhileWaitingDoNotCount: a controller manager that Docker
// restarts many times while its API server starts, and that runs once the
// API server is healthy, is up: its restarts count from when the API
// server is healthy.
func TestRestartsWhileWaitingDoNotCount(t *testing.T) {
	d := build(t, clusterYML)
	restart := func(component string) plan.Step {
		dn, _ := d.Node("10.0.0.1")
		dc, _ := dn.Container(component)
		return plan.Step{Node: "10.0.0.1", Component: component, Action: plan.Restart, Phase: plan.PhaseControlPlane, After: dc, Reason: "test"}
	}
	p := &plan.Plan{ObservedAt: now, Steps: []plan.Step{restart(desired.KubeAPIServer), restart(desired.KubeControllerManager)}}
	synctest.Test(t, func(t *testing.T) {
		const apiStart = 30 * time.Second
		e := &loopEngine{crashing: map[string]bool{desired.KubeControllerManager: true}, until: time.Now().Add(apiStart)}
		o := Options{Desired: d, Health: probes{slow: map[string]time.Duration{desired.KubeAPIServer: apiStart}}, Now: time.Now,
			Nodes: func(context.Context, string) (dockerop.Engine, error) { return e, nil }}
		began := time.Now()
		if _, err := Run(t.Context(), p, o); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took < apiStart+dockerop.MinUptime || took > apiStart+dockerop.MinUptime+time.Second {
			t.Errorf("Run took %s, want the API server's start and the controller manager's MinUptime after it", took)
		}
	})
}

// timedEngine is a node's engine whose containers, once a step restarted
// them, run for crashAfter (by name; for ever when not set), then restart
// over and over as Docker's restart policy restarts a crashing one: each
// run lasts crashAfter again, until stableAfter (by name; never when not
// set), from when the run under way goes on for ever. Restarts go to a
// shared log with their time.
type timedEngine struct {
	dockerop.Engine
	node        string
	crashAfter  map[string]time.Duration
	stableAfter map[string]time.Duration
	log         *startLog
	mu          sync.Mutex
	started     map[string]time.Time
}

// startLog records when each container was started by a step, in order.
type startLog struct {
	mu     sync.Mutex
	began  time.Time
	starts []string
}

func (l *startLog) add(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.starts = append(l.starts, fmt.Sprintf("%s at %s", what, time.Since(l.began)))
}

func (l *startLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.starts)
}

func (e *timedEngine) ContainerRestart(_ context.Context, name string, _ container.StopOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started == nil {
		e.started = map[string]time.Time{}
	}
	e.started[name] = time.Now()
	e.log.add(e.node + " " + name)
	return nil
}

func (e *timedEngine) ContainerInspect(_ context.Context, name string) (container.InspectResponse, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := &container.State{Status: container.StateRunning, Running: true, StartedAt: "0"}
	restarts := 0
	if after := e.crashAfter[name]; after > 0 {
		// Runs of after each, 100 ms apart (Docker's first back-off).
		since := time.Since(e.started[name])
		if stable := e.stableAfter[name]; stable > 0 {
			since = min(since, stable)
		}
		runs := int(since / (after + 100*time.Millisecond))
		restarts = runs
		st.StartedAt = fmt.Sprint(runs)
		if since%(after+100*time.Millisecond) >= after {
			st.Status, st.Restarting, st.ExitCode = container.StateRestarting, true, 1
		}
	}
	return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{
		RestartCount: restarts, State: st,
		HostConfig: &container.HostConfig{RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyAlways}},
	}}, nil
}

func (e *timedEngine) ContainerLogs(_ context.Context, name string, _ container.LogsOptions) (io.ReadCloser, error) {
	var b strings.Builder
	w := stdcopy.NewStdWriter(&b, stdcopy.Stderr)
	w.Write([]byte("F1202 server.go:88] " + name + " gave up\n"))
	return io.NopCloser(strings.NewReader(b.String())), nil
}

// TestUptimeOverlapsTheNextNode: a rolling change goes on to the next node
// once a node's components are healthy and held (dockerop.Hold), while
// they are watched on to MinUptime, when the serving nodes allow it (three
// API servers: two batches down leave one); it waits for them to stay up
// first when they do not (two API servers). One batch's watch overlaps the
// next one's work, no more. A component that crashes 5 s after its start
// stops the change before a third node; one that crashes every 30 s fails
// the run at its end when the run has gone on long enough for two crashes
// (the worker phase's slow health check), naming the node, the component
// and its last lines; one crash is not a loop.
func TestUptimeOverlapsTheNextNode(t *testing.T) {
	const three = clusterYML
	const two = `cluster_name: test
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}
  - {address: 10.0.0.2, user: u, role: [controlplane, worker]}
`
	steps := func(d *desired.Cluster, component string, phase plan.Phase, nodes ...string) []plan.Step {
		var out []plan.Step
		for _, n := range nodes {
			dn, _ := d.Node(n)
			dc, _ := dn.Container(component)
			out = append(out, plan.Step{Node: n, Component: component, Action: plan.Restart, Phase: phase, After: dc, Reason: "test"})
		}
		return out
	}
	const (
		hold = dockerop.Hold
		up   = dockerop.MinUptime
	)
	for _, tc := range []struct {
		name       string
		yml        string
		nodes      []string
		crashAfter time.Duration
		// worker adds a kubelet restart on 10.0.0.4 whose health check
		// takes that long.
		worker time.Duration
		starts []string
		took   time.Duration
		want   string // in the error; "" for none
	}{
		{
			name: "three API servers: the next node once healthy and held", yml: three,
			nodes:  []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"},
			starts: []string{"10.0.0.1 kube-scheduler at 0s", "10.0.0.2 kube-scheduler at 2s", "10.0.0.3 kube-scheduler at 10s"},
			took:   2 * up,
		},
		{
			name: "two API servers: each node up before the next", yml: two,
			nodes:  []string{"10.0.0.1", "10.0.0.2"},
			starts: []string{"10.0.0.1 kube-scheduler at 0s", "10.0.0.2 kube-scheduler at 10s"},
			took:   2 * up,
		},
		{
			name: "a crash 5 s after the start stops the change before the third node", yml: three,
			nodes: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, crashAfter: 5 * time.Second,
			starts: []string{"10.0.0.1 kube-scheduler at 0s", "10.0.0.2 kube-scheduler at 2s"},
			want:   "node 10.0.0.1: kube-scheduler does not stay up: exited with code 1, and Docker restarted it 7 times since rigger started it",
		},
		{
			// Once is not a crash loop (a scheduler that lost its leader
			// election exits too).
			name: "a crash 30 s after the start, once in the run", yml: three,
			nodes: []string{"10.0.0.1"}, crashAfter: 30 * time.Second, worker: 40 * time.Second,
			starts: []string{"10.0.0.1 kube-scheduler at 0s", "10.0.0.4 kubelet at 2s"},
			took:   42 * time.Second,
		},
		{
			name: "a crash every 30 s, twice in the run", yml: three,
			nodes: []string{"10.0.0.1"}, crashAfter: 30 * time.Second, worker: 70 * time.Second,
			starts: []string{"10.0.0.1 kube-scheduler at 0s", "10.0.0.4 kubelet at 2s"},
			want:   "node 10.0.0.1: kube-scheduler does not stay up: exited (its exit code was not seen) after it had run 10s, and Docker restarted it twice since; now running",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := build(t, tc.yml)
				p := &plan.Plan{ObservedAt: now, Steps: steps(d, desired.KubeScheduler, plan.PhaseControlPlane, tc.nodes...)}
				pr := probes{}
				if tc.worker > 0 {
					p.Steps = append(p.Steps, steps(d, desired.Kubelet, plan.PhaseWorker, "10.0.0.4")...)
					pr.slow = map[string]time.Duration{desired.Kubelet: tc.worker}
				}
				log := &startLog{began: time.Now()}
				engines := map[string]*timedEngine{}
				for _, n := range d.Nodes {
					engines[n.Address] = &timedEngine{node: n.Address, log: log, crashAfter: map[string]time.Duration{}}
				}
				if tc.crashAfter > 0 {
					engines["10.0.0.1"].crashAfter[desired.KubeScheduler] = tc.crashAfter
				}
				o := Options{Desired: d, Health: pr, Budgets: plan.Budgets{WorkerBatch: 1}, Now: time.Now,
					Nodes: func(_ context.Context, n string) (dockerop.Engine, error) { return engines[n], nil }}
				began := time.Now()
				_, err := Run(t.Context(), p, o)
				took := time.Since(began)
				if diff := cmp.Diff(tc.starts, log.get()); diff != "" {
					t.Errorf("starts (-want +got):\n%s", diff)
				}
				if tc.want == "" {
					if err != nil {
						t.Fatal(err)
					}
					if took != tc.took {
						t.Errorf("Run took %s, want %s", took, tc.took)
					}
					return
				}
				var crash *dockerop.CrashLoopError
				if !errors.As(err, &crash) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error:\n%v\nwant a *CrashLoopError:\n%s", err, tc.want)
				}
				if !strings.HasSuffix(err.Error(), "last lines of kube-scheduler on 10.0.0.1:\nF1202 server.go:88] kube-scheduler gave up") {
					t.Errorf("error:\n%v\nwant it to end with the last lines", err)
				}
			})
		})
	}
}

// TestRestartsBeforeHealthyDoNotCount: an API server that stays up
// MinUptime, exits twice while it starts (its bootstrap timed out on a slow
// etcd), and then is healthy and stays up is not in a crash loop: its
// restarts count from its health on, and the run says so. One that goes on
// crashing after its health fails the run (TestUptimeOverlapsTheNextNode).
func TestRestartsBeforeHealthyDoNotCount(t *testing.T) {
	d := build(t, clusterYML)
	dn, _ := d.Node("10.0.0.1")
	dc, _ := dn.Container(desired.KubeAPIServer)
	p := &plan.Plan{ObservedAt: now, Steps: []plan.Step{{Node: "10.0.0.1", Component: desired.KubeAPIServer, Action: plan.Restart,
		Phase: plan.PhaseControlPlane, After: dc, Reason: "test"}}}
	synctest.Test(t, func(t *testing.T) {
		// Runs of 15 s: restarted at 15.1 and 30.2 s, healthy at 40 s.
		e := &timedEngine{node: "10.0.0.1", log: &startLog{began: time.Now()},
			crashAfter:  map[string]time.Duration{desired.KubeAPIServer: 15 * time.Second},
			stableAfter: map[string]time.Duration{desired.KubeAPIServer: 35 * time.Second}}
		var said []string
		o := Options{Desired: d, Health: probes{slow: map[string]time.Duration{desired.KubeAPIServer: 40 * time.Second}}, Now: time.Now,
			Nodes: func(context.Context, string) (dockerop.Engine, error) { return e, nil },
			Hooks: plan.Hooks{Step: func(_, msg string, _ error) { said = append(said, msg) }}}
		if _, err := Run(t.Context(), p, o); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(said, func(m string) bool {
			return strings.Contains(m, "kube-apiserver was restarted 2 time(s) by Docker after it had run 10s and before it was healthy")
		}) {
			t.Errorf("said %q", said)
		}
	})
}

// slowPromote is a membership whose promotions never complete: a learner
// that cannot catch up.
type slowPromote struct{ membersFake }

func (f *slowPromote) Promote(ctx context.Context, _ []string, _ uint64) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestPromotionStopsAtACrashLoop: a learner whose etcd container Docker
// restarts over and over (a member that cannot join) fails the run with
// the crash loop and etcd's last lines once the loop is seen, not after
// the promotion's timeout.
func TestPromotionStopsAtACrashLoop(t *testing.T) {
	d := build(t, clusterYML)
	synctest.Test(t, func(t *testing.T) {
		learner := etcdmember.Member{Name: "etcd-10.0.0.3", PeerURLs: []string{"https://10.0.0.3:2380"}, IsLearner: true}
		voter := func(id uint64, host string) etcdmember.Member {
			return etcdmember.Member{ID: id, Name: "etcd-" + host, PeerURLs: []string{"https://" + host + ":2380"},
				ClientURLs: []string{"https://" + host + ":2379"}, Healthy: true}
		}
		fake := &slowPromote{membersFake{members: []etcdmember.Member{voter(1, "10.0.0.1"), voter(2, "10.0.0.2")}, via: map[string][]string{}}}
		dn, _ := d.Node("10.0.0.3")
		dc, _ := dn.Container(desired.Etcd)
		p := &plan.Plan{ObservedAt: now, Steps: []plan.Step{
			{Node: "10.0.0.3", Component: plan.EtcdMemberComponent, Action: plan.AddMember, Phase: plan.PhaseEtcd, Member: &learner},
			{Node: "10.0.0.3", Component: desired.Etcd, Action: plan.Restart, Phase: plan.PhaseEtcd, After: dc, Reason: "test"},
		}}
		e := &loopEngine{crashing: map[string]bool{desired.Etcd: true}}
		o := Options{Desired: d, Health: probes{}, Now: time.Now,
			Nodes: func(context.Context, string) (dockerop.Engine, error) { return e, nil },
			Etcd:  func(context.Context) (Membership, error) { return fake, nil }}
		began := time.Now()
		_, err := Run(t.Context(), p, o)
		var crash *dockerop.CrashLoopError
		if !errors.As(err, &crash) || crash.Container != desired.Etcd || !strings.Contains(err.Error(), "last lines of etcd on 10.0.0.3") {
			t.Fatalf("error %v, want etcd's crash loop with its last lines", err)
		}
		if took := time.Since(began); took > 10*time.Second {
			t.Errorf("the crash loop stopped the promotion after %s", took)
		}
	})
}
