package simnode_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/sync/errgroup"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/simnode"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// scaleSizes are the cluster sizes BenchmarkScaleSimulated measures.
var scaleSizes = []int{10, 100, 500, 1000}

// scalePairs is how many times, for each size, a floor, an observe+plan
// and a no-op apply are run one after the other; the medians are reported.
const scalePairs = 5

// BenchmarkScaleSimulated measures how rigger's observe+plan of a
// converged cluster, a no-op apply, and a one-flag change rolled out to
// every node grow with the number of nodes, on simulated nodes (package
// simnode; every figure it reports is simulated), each beside a floor
// measured in the same run.
//
// The cluster: node 0 with the etcd and controlplane roles, every other
// node a worker; each simulated node runs (in its in-memory engine) the
// containers rigger's desired state gives it, labelled as rigger labels
// them, and holds under /etc/kubernetes the files rigger would write
// there. So the plan is a no-op, and the benchmark checks it is.
//
// What runs is rigger's own code for the per-node part of `rigger plan`:
// cluster.yml loaded by spec.Load, the SSH transport built from it by
// reach.Transport (host keys checked against known_hosts, at most
// rigger.max_parallel connections set up at once), observe.Observe of
// every node (version at connect, container list and the files read through
// the kubelet's bind mount, at most rigger.max_parallel nodes at once),
// then the decision every plan makes (decide.Compute, through
// simnode.Plan): the PKI resolved from a state holding it (made once,
// beforehand), desired.Build, the plan's checks, each node's files
// (pki.NodeFiles and desired.ConfigFiles), plan.Compute and the budgets.
// Left out, because they read the Kubernetes API and etcd, which the
// simulation does not run: etcd's members, the Nodes, the add-ons' dry
// run, and the reading of the state directory. A real plan reads those
// beside the nodes. The no-op
// apply is the same, then execute.Run of the (empty) plan through the
// same connections; the lock, the Lease, the state directory's writes
// and the Kubernetes side of a real apply are left out.
//
// The floor: the same N nodes, each one SSH handshake (x/crypto/ssh, the
// same key and known_hosts) and one Docker API call (the container list)
// over the socket channel, rigger.max_parallel's default at once, without
// rigger's logic.
//
// The rollout (rolloutTo, in rolloutRuns of the rounds): the kubelet's
// extra_args gets a flag (rolloutFlag, set to each of rolloutValues in
// turn, from a cluster.yml loaded by spec.Load), and rigger's own code
// carries it out: the transport, observe.Observe, desired.Build and
// plan.Compute as above (the plan must replace every node's kubelet and do
// nothing else), the batch size from upgrade_strategy's default
// max_unavailable_worker (10 %, resolved by plan.Unavailability), and
// execute.Run with rigger's health checker: batch by batch, every
// kubelet replaced (dockerop.Replace), probed on the node's
// 127.0.0.1:10248 /healthz through the SSH connection (simnode answers it
// only while the kubelet's container runs) and watched by dockerop.WaitUp
// until it has run rolloutMinUptime (a real apply: 10 s), before the next
// batch. Left out, because the simulation runs no API server: each node's
// cordon and uncordon and its Node Ready (execute.Options.BeforeNode and
// AfterNode are not set), and the Kubernetes objects' phase (a no-op);
// the lock, the Lease and the state directory as in the no-op apply.
// After each rollout, outside the measure, the benchmark checks that every
// node's kubelet runs with the new flag and that the next plan is a
// no-op, and fails otherwise. Its floor (rolloutFloor): the N SSH
// connections set up as the floor's, then the same batches, every node of
// a batch at once, each node's kubelet replaced with the fewest Docker API
// calls (stop, remove, create, start) and one GET of its /healthz through
// the same connection.
//
// Each run reports its wall time; the peak of runtime.MemStats.HeapInuse,
// sampled every 5 ms, above its level after a GC at the start (this
// process only: the simulated nodes run in a child process); this
// process's CPU time; and the simulated nodes' process's CPU time, which
// on a machine of few cores competes with rigger's.
func BenchmarkScaleSimulated(b *testing.B) {
	if lim, err := simnode.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	} else if need := uint64(slices.Max(scaleSizes)*4 + 100); lim < need {
		b.Skipf("the open files limit is %d; %d simulated nodes need about %d", lim, slices.Max(scaleSizes), need)
	}
	results := map[int]scaleResult{}
	for _, n := range scaleSizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			results[n] = benchScale(b, n)
		})
	}
	logFit(b, results)
}

// scaleResult is what one size measured: the medians of the floor, of
// observe+plan and of the no-op apply; of the rollout's floor and of the
// rollout, and the rollout's number of batches.
type scaleResult struct {
	floor, plan, apply run
	rollFloor, rollout run
	batches            int
}

func benchScale(b *testing.B, n int) scaleResult {
	sc := newScaleCluster(b, n)
	ctx := context.Background()
	var res scaleResult
	for b.Loop() {
		var floors, plans, applies, rollFloors, rollouts []run
		for i := range scalePairs {
			sc.settle(b)
			r, err := sc.measure(func() error { return sc.floor(ctx) })
			if err != nil {
				b.Fatalf("the floor: %v", err)
			}
			floors = append(floors, r)
			for _, apply := range []bool{false, true} {
				var steps *plan.Plan
				sc.settle(b)
				r, err := sc.measure(func() (err error) {
					steps, err = sc.observePlan(ctx, apply)
					return err
				})
				if err != nil {
					b.Fatalf("observe+plan (apply %v): %v", apply, err)
				}
				if !steps.Empty() || len(steps.Unreachable) > 0 {
					b.Fatalf("observe+plan of the converged simulated cluster is not a no-op: %d steps (first %+v), unreachable %v",
						len(steps.Steps), firstStep(steps), steps.Unreachable)
				}
				if apply {
					applies = append(applies, r)
				} else {
					plans = append(plans, r)
				}
			}
			if i >= rolloutRuns {
				continue
			}
			batches, bodies, err := sc.rolloutFloorInput()
			if err != nil {
				b.Fatal(err)
			}
			sc.settle(b)
			r, err = sc.measure(func() error { return sc.rolloutFloor(ctx, batches, bodies) })
			if err != nil {
				b.Fatalf("the rollout's floor: %v", err)
			}
			rollFloors = append(rollFloors, r)
			sc.settle(b)
			r, n := sc.rollout(ctx, b)
			if n != len(batches) {
				b.Fatalf("the rollout made %d batches, its floor %d", n, len(batches))
			}
			rollouts = append(rollouts, r)
			res.batches = n
		}
		res.floor, res.plan, res.apply = medianRun(floors), medianRun(plans), medianRun(applies)
		res.rollFloor, res.rollout = medianRun(rollFloors), medianRun(rollouts)
	}
	const mb = 1 << 20
	for _, m := range []struct {
		name  string
		r     run
		floor time.Duration
	}{{"floor", res.floor, 0}, {"plan", res.plan, res.floor.wall}, {"apply", res.apply, res.floor.wall},
		{"rollfloor", res.rollFloor, 0}, {"rollout", res.rollout, res.rollFloor.wall}} {
		b.ReportMetric(m.r.wall.Seconds(), "sim-"+m.name+"-s")
		b.ReportMetric(float64(m.r.heap)/mb, "sim-"+m.name+"-heap-MB")
		b.ReportMetric(m.r.cpu.Seconds(), "sim-"+m.name+"-cpu-s")
		b.ReportMetric(m.r.nodesCPU.Seconds(), "sim-"+m.name+"-nodes-cpu-s")
		if m.floor > 0 {
			b.ReportMetric(m.r.wall.Seconds()/m.floor.Seconds(), "sim-"+m.name+"/floor")
		}
	}
	b.ReportMetric(float64(res.batches), "sim-rollout-batches")
	b.ReportMetric(float64(res.plan.wall.Microseconds())/1000/float64(n), "sim-plan-ms/node")
	return res
}

func firstStep(p *plan.Plan) any {
	if len(p.Steps) == 0 {
		return nil
	}
	s := p.Steps[0]
	return struct{ Node, Component, Action, Reason string }{s.Node, s.Component, string(s.Action), s.Reason}
}

// settleTimeout bounds the wait for the simulated nodes to have closed
// the connections of the run before.
const settleTimeout = time.Minute

// settle waits, before each measured run, until the simulated nodes'
// process has closed every connection of the run before (a thousand of
// them), so that it does not do it during the next one: it asks the
// child ("settle") and waits for its answer ("settled").
func (sc *scaleCluster) settle(b *testing.B) {
	b.Helper()
	if answer, err := sc.nodes.Ask("settle", settleTimeout+10*time.Second); err != nil || answer != "settled" {
		b.Fatalf("the simulated nodes' process answered %q (%v) to settle", answer, err)
	}
}

// run is what one measured run took: its wall time, the peak of
// HeapInuse above its level after a GC at the start, the CPU time of this
// process (rigger, or the floor) and that of the simulated nodes' process.
type run struct {
	wall, cpu, nodesCPU time.Duration
	heap                uint64
}

// measure runs f and returns what it took.
func (sc *scaleCluster) measure(f func() error) (run, error) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	var peak atomic.Uint64
	peak.Store(base)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peak.Load() {
					peak.Store(ms.HeapInuse)
				}
			}
		}
	}()
	cpu0, nodes0 := selfCPU(), processCPU(sc.pid)
	start := time.Now()
	err := f()
	r := run{wall: time.Since(start), cpu: selfCPU() - cpu0, nodesCPU: processCPU(sc.pid) - nodes0}
	close(stop)
	<-sampled
	runtime.ReadMemStats(&ms)
	r.heap = max(peak.Load(), ms.HeapInuse) - base
	return r, err
}

// selfCPU is this process's CPU time, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the CPU time, user and system, of process pid, from
// /proc/PID/stat (in clock ticks of 10 ms); 0 when it cannot be read.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis, from the 3rd:
	// utime and stime are the 14th and 15th.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// medianRun is the run of the median wall time, with the median of each
// other figure.
func medianRun(runs []run) run {
	pick := func(f func(run) int64) int64 {
		v := make([]int64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return run{
		wall:     time.Duration(pick(func(r run) int64 { return int64(r.wall) })),
		cpu:      time.Duration(pick(func(r run) int64 { return int64(r.cpu) })),
		nodesCPU: time.Duration(pick(func(r run) int64 { return int64(r.nodesCPU) })),
		heap:     uint64(pick(func(r run) int64 { return int64(r.heap) })),
	}
}

// scaleCluster is a converged cluster of simulated nodes, which run in a
// child process (TestSimulatedNodesProcess), and the cluster.yml that
// describes them.
type scaleCluster struct {
	// c is cluster.yml as the nodes start; current is the one they run
	// (c, or the last rollout's flagged), which the no-op runs plan.
	c, current *spec.Cluster
	// flagged are cluster.yml with the rollout's flag, one for each of
	// rolloutValues; rollouts counts the rollouts made.
	flagged    [2]*spec.Cluster
	rollouts   int
	req        pki.Request
	set        *pki.Set
	signer     ssh.Signer
	knownHosts string
	pid        int // of the simulated nodes' process
	nodes      *simnode.Process
}

// simDirEnv names the directory a TestSimulatedNodesProcess child finds
// its cluster in.
const simDirEnv = "RIGGER_SIMNODE_DIR"

// newScaleCluster writes a cluster.yml of n simulated nodes, its key and
// its PKI, and starts the nodes in a child process, converged: so that
// the heap this process measures is rigger's (and the floor's), not the
// simulated nodes'.
func newScaleCluster(b *testing.B, n int) *scaleCluster {
	b.Helper()
	signer, keyPEM := newKey(b)
	dir := b.TempDir()
	keyPath, kh := filepath.Join(dir, "id_ed25519"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(keyPath+".pub", ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o600); err != nil {
		b.Fatal(err)
	}
	load := func(name, services string) *spec.Cluster {
		var yml strings.Builder
		fmt.Fprintf(&yml, "cluster_name: sim\nssh_key_path: %s\nrigger:\n  ssh:\n    known_hosts_file: %s\n%snodes:\n", keyPath, kh, services)
		for i := range n {
			roles := "[worker]"
			if i == 0 {
				roles = "[etcd, controlplane]"
			}
			fmt.Fprintf(&yml, "  - {address: %s, port: %q, user: root, role: %s, hostname_override: sim-%d}\n",
				simnode.Address(i), strconv.Itoa(simnode.DefaultPort), roles, i)
		}
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(yml.String()), 0o600); err != nil {
			b.Fatal(err)
		}
		c, diags, err := spec.Load(file)
		if err != nil {
			b.Fatalf("load the simulated %s: %v\n%v", name, err, diags)
		}
		return c
	}
	c := load("cluster.yml", "")
	var flagged [2]*spec.Cluster
	for i, v := range rolloutValues {
		flagged[i] = load(fmt.Sprintf("cluster-%s-%s.yml", rolloutFlag, v),
			fmt.Sprintf("services:\n  kubelet:\n    extra_args: {%s: %q}\n", rolloutFlag, v))
	}
	req := pki.RequestFor(c)
	set, _, err := pki.Ensure(nil, req, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if err := pki.Save(filepath.Join(dir, "pki"), set); err != nil {
		b.Fatal(err)
	}

	nodes, err := simnode.StartProcess("TestSimulatedNodesProcess", []string{simDirEnv + "=" + dir}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = nodes.Close() })
	return &scaleCluster{c: c, current: c, flagged: flagged, req: req, set: set, signer: signer, knownHosts: kh,
		pid: nodes.PID(), nodes: nodes}
}

// TestSimulatedNodesProcess is the child process of
// BenchmarkScaleSimulated: it starts the nodes of the cluster.yml in
// $RIGGER_SIMNODE_DIR, converged (running the containers rigger's desired
// state gives each, with the files rigger writes under /etc/kubernetes),
// writes their known_hosts, says it is ready, and stops them when its
// standard input closes.
func TestSimulatedNodesProcess(t *testing.T) {
	dir := os.Getenv(simDirEnv)
	if dir == "" {
		t.Skip("the child process of BenchmarkScaleSimulated")
	}
	key, err := simnode.ChildKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, diags, err := spec.Load(filepath.Join(dir, "cluster.yml"))
	if err != nil {
		t.Fatalf("%v\n%v", err, diags)
	}
	set, err := pki.Load(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	sc := &scaleCluster{c: c, current: c, req: pki.RequestFor(c), set: set}
	d, err := sc.desired(c)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simnode.Start(simnode.Options{Nodes: len(c.Nodes), User: "root", AuthorizedKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	for i, dn := range d.Nodes {
		if sim.Nodes[i].Address != dn.Address {
			t.Fatalf("desired node %d is %s, simulated %s", i, dn.Address, sim.Nodes[i].Address)
		}
		simnode.Converge(sim.Nodes[i].Engine, c, dn)
	}
	kh := c.Rigger.SSH.KnownHostsFile
	if err := os.WriteFile(kh+".tmp", sim.KnownHosts(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kh+".tmp", kh); err != nil {
		t.Fatal(err)
	}
	// Each "settle" is answered once the nodes hold no connection (those
	// of the run before closed); the end of standard input stops them.
	if err := simnode.Serve(sim, os.Stdin, os.Stdout, settleTimeout); err != nil {
		t.Fatal(err)
	}
}

// desired is what decide.Compute decides for the nodes of c
// (simnode.Desired).
func (sc *scaleCluster) desired(c *spec.Cluster) (*desired.Cluster, error) {
	return simnode.Desired(c, sc.set)
}

// observePlan is the benchmarked path: a transport built from cluster.yml,
// every node observed through it, the plan computed, and with apply the
// plan carried out by execute.Run through the same connections
// (simnode.Apply: the nodes' part of a no-op apply), the transport closed.
func (sc *scaleCluster) observePlan(ctx context.Context, apply bool) (*plan.Plan, error) {
	c := sc.current
	tr, err := reach.Transport(c, nil, nil, false, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	pl, err := sc.plan(ctx, c, tr)
	if err != nil {
		return nil, err
	}
	if !apply || !pl.Plan.Empty() {
		return pl.Plan, nil
	}
	if _, err := simnode.Apply(ctx, tr, c, pl, plan.Hooks{}, reconcile.MaxPlanAge); err != nil {
		return nil, err
	}
	return pl.Plan, nil
}

// plan observes every node of c through tr and decides the plan, as
// rigger plan does for the nodes (simnode.Plan: decide.Compute).
func (sc *scaleCluster) plan(ctx context.Context, c *spec.Cluster, tr transport.Transport) (*decide.Planned, error) {
	return simnode.Plan(ctx, tr, c, sc.set)
}

// floor connects to every node (an SSH handshake, the host key checked
// against the same known_hosts) and lists its containers over the socket
// channel, spec.DefaultMaxParallel nodes at once.
func (sc *scaleCluster) floor(ctx context.Context) error {
	hostKeys, err := knownhosts.New(sc.knownHosts)
	if err != nil {
		return err
	}
	cfg := &ssh.ClientConfig{User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(sc.signer)}, HostKeyCallback: hostKeys,
		Timeout: 30 * time.Second}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(spec.DefaultMaxParallel)
	for _, n := range sc.c.Nodes {
		g.Go(func() error {
			cli, err := ssh.Dial("tcp", net.JoinHostPort(n.Address, n.Port), cfg)
			if err != nil {
				return err
			}
			defer cli.Close()
			hc := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
				return cli.Dial("unix", simnode.DefaultDockerSocket)
			}}}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/v"+simnode.APIVersion+"/containers/json?all=1", nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("node %s: list containers: %s", n.Address, resp.Status)
			}
			return nil
		})
	}
	return g.Wait()
}

// logFit logs least-squares lines of the wall times and peak heaps over
// the number of nodes, with R².
func logFit(b *testing.B, results map[int]scaleResult) {
	if len(results) < 2 {
		return
	}
	var ns []int
	for n := range results {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	series := []struct {
		name, unit string
		scale      float64
		value      func(scaleResult) float64
	}{
		{"floor wall", "ms", 1e3, func(r scaleResult) float64 { return r.floor.wall.Seconds() }},
		{"observe+plan wall", "ms", 1e3, func(r scaleResult) float64 { return r.plan.wall.Seconds() }},
		{"no-op apply wall", "ms", 1e3, func(r scaleResult) float64 { return r.apply.wall.Seconds() }},
		{"floor peak heap", "KiB", 1.0 / 1024, func(r scaleResult) float64 { return float64(r.floor.heap) }},
		{"observe+plan peak heap", "KiB", 1.0 / 1024, func(r scaleResult) float64 { return float64(r.plan.heap) }},
		{"no-op apply peak heap", "KiB", 1.0 / 1024, func(r scaleResult) float64 { return float64(r.apply.heap) }},
		{"rollout floor wall", "ms", 1e3, func(r scaleResult) float64 { return r.rollFloor.wall.Seconds() }},
		{"one-flag rollout wall", "ms", 1e3, func(r scaleResult) float64 { return r.rollout.wall.Seconds() }},
		{"rollout floor peak heap", "KiB", 1.0 / 1024, func(r scaleResult) float64 { return float64(r.rollFloor.heap) }},
		{"one-flag rollout peak heap", "KiB", 1.0 / 1024, func(r scaleResult) float64 { return float64(r.rollout.heap) }},
	}
	for _, s := range series {
		xs, ys := make([]float64, len(ns)), make([]float64, len(ns))
		for i, n := range ns {
			xs[i], ys[i] = float64(n), s.value(results[n])*s.scale
		}
		slope, icept, r2 := leastSquares(xs, ys)
		// Printed, not logged: a benchmark's log shows only with -v.
		fmt.Printf("simulated, least-squares fit over N=%v: %s = %.3f %s/node × N %+.1f %s, R² = %.4f\n",
			ns, s.name, slope, s.unit, icept, s.unit, r2)
	}
}

// leastSquares fits y = slope·x + intercept and returns R².
func leastSquares(xs, ys []float64) (slope, intercept, r2 float64) {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	slope = (n*sxy - sx*sy) / (n*sxx - sx*sx)
	intercept = (sy - slope*sx) / n
	mean := sy / n
	var ssRes, ssTot float64
	for i := range xs {
		f := slope*xs[i] + intercept
		ssRes += (ys[i] - f) * (ys[i] - f)
		ssTot += (ys[i] - mean) * (ys[i] - mean)
	}
	if ssTot == 0 {
		return slope, intercept, 1
	}
	return slope, intercept, 1 - ssRes/ssTot
}
