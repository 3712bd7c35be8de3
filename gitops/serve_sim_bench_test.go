package gitops_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/gitops/webhook"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/reach"
	"github.com/rigger/rigger/reconcile/simnode"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
)

// The shape of BenchmarkServeSimulated.
const (
	simClusters     = 100
	simNodesPerClus = 3
	// simPort keeps the benchmark's nodes apart from simnode's tests and
	// scale benchmark.
	simPort = 22322
	// simDrift is the drift interval: short, so that a run sees two
	// rounds of drift checks of every cluster.
	simDrift = 15 * time.Second
	// simPushes is how many pushes, each to one cluster, are timed.
	simPushes = 10
	// simSlowDelay is how long each Docker API request of the slow
	// cluster's nodes waits.
	simSlowDelay = 3 * time.Second
	// simServeDirEnv names the directory a TestSimulatedClustersProcess
	// child finds the clusters in.
	simServeDirEnv = "RIGGER_SIMSERVE_DIR"
)

// BenchmarkServeSimulated runs one in-process `rigger serve` (gitops.Server,
// with its webhook called by the post-receive hook of a bare origin, as
// BenchmarkServeSandbox does) following one repository of 100 clusters of
// 3 simulated nodes each (package simnode, in a child process: the memory
// measured here is serve's, not the nodes'). Every figure it reports is
// simulated.
//
// Each cluster's reconcile does real per-node work through rigger's code:
// cluster.yml read from the repository and parsed by serve, the cluster's
// lock file taken in its state directory, the SSH transport built from
// cluster.yml (reach.Transport, host keys checked), every node observed
// (observe.Observe), the plan decided as every plan is (decide.Compute,
// through simnode.Plan: the desired state built with each node's
// certificates, kubeconfigs and config files), applied by execute.Run when
// it has steps (simnode.Apply), its status (the plan's Status, the
// doctor's problems its observation answers included), and status.yml
// committed and pushed when its meaning changed. Left out, because the
// simulation runs no etcd and no Kubernetes API: etcd's members, the
// Kubernetes Nodes, the add-ons' dry run, the cluster's Lease, the etcd
// snapshot schedule and restores; the PKI is made beforehand and read from
// disk at each reconcile, the only record of a state the decision gets.
//
// It measures, in one run:
//   - settle: the 100 clusters pushed in one commit, until each has
//     reconciled once;
//   - memory: the peak of HeapInuse (sampled every 20 ms) and this
//     process's peak RSS (VmHWM) with 100 clusters settled and across two
//     rounds of drift checks;
//   - drift spread: every drift check's start over two intervals, by its
//     phase in the interval: the checks per tenth of it, how even those
//     are, and the longest part of the interval without a check;
//   - push → reconcile start, webhook, for pushes that each change one
//     cluster.yml, with drift checks going on; the benchmark fails if a
//     push makes any other cluster reconcile for a change;
//   - one slow cluster (every Docker request of its nodes 2 s late): the
//     push → reconcile start of other clusters while it reconciles.
func BenchmarkServeSimulated(b *testing.B) {
	needOpenFiles(b)
	for b.Loop() {
		benchServeSimulated(b)
	}
}

// needOpenFiles raises the open files limit, and skips the benchmark when
// it stays too low for a fleet's nodes.
func needOpenFiles(b *testing.B) {
	b.Helper()
	if lim, err := simnode.RaiseFileLimit(); err != nil {
		b.Fatal(err)
	} else if need := uint64(simClusters*simNodesPerClus*4 + 200); lim < need {
		b.Skipf("the open files limit is %d; %d simulated nodes need about %d", lim, simClusters*simNodesPerClus, need)
	}
}

// waitSettled waits until each of the fleet's clusters has reconciled
// once; it fails the benchmark on a reconcile's error.
func waitSettled(b *testing.B, rec *eventLog) {
	b.Helper()
	ended := map[string]bool{}
	from := 0
	for len(ended) < simClusters {
		e, next := rec.wait(b, from, 5*time.Minute, "every cluster reconciled once", func(e timedEvent) bool {
			return e.Kind == gitops.EventReconcileEnd
		})
		from = next
		if e.Err != nil {
			b.Fatalf("%s: %v", e.Path, e.Err)
		}
		ended[e.Path] = true
	}
}

// simFleet is the clusters of the benchmark: their files in dir, and the
// child process running their nodes.
type simFleet struct {
	dir   string
	names []string
	yml   map[string]string // cluster.yml by cluster name
	nodes *simnode.Process
}

func benchServeSimulated(b *testing.B) {
	fleet := newSimFleet(b)
	rec := &eventLog{wake: make(chan struct{}, 1)}
	var webhooks atomic.Int64
	mem := startMemSampler()
	defer mem.stop()

	// The server, its webhook, and the origin whose hook calls it.
	var srv *gitops.Server
	mux := http.NewServeMux()
	ts := httptest.NewServer(mux)
	defer ts.Close()
	port, _ := strconv.Atoi(ts.URL[strings.LastIndex(ts.URL, ":")+1:])
	o := newOrigin(b, port)
	repo, err := gitrepo.Open(context.Background(), filepath.Join(b.TempDir(), "clone"), "file://"+o.bare, gitrepo.Auth{})
	if err != nil {
		b.Fatal(err)
	}
	srv, err = gitops.New(gitops.Config{Repo: repo, Branch: "main", Path: "clusters", StateDir: b.TempDir(),
		Interval: time.Hour, DriftInterval: simDrift,
		Author: object.Signature{Name: "rigger-bench", Email: "rigger@example.test"},
		Open:   fleet.open, Events: rec.add})
	if err != nil {
		b.Fatal(err)
	}
	h, err := webhook.New(webhook.Config{Secret: []byte(secret), Branch: "main", Trigger: func(webhook.Event) {
		webhooks.Add(1)
		rec.add(gitops.Event{Kind: eventWebhook})
		srv.Trigger()
	}})
	if err != nil {
		b.Fatal(err)
	}
	mux.Handle(webhook.Path([]byte(secret)), h)
	files := map[string]string{}
	for _, name := range fleet.names {
		files[clusterFile(name)] = fleet.yml[name]
	}
	o.commit(b, "100 clusters", files)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Settle: every cluster reconciled once.
	pushed := time.Now()
	o.push(b)
	waitSettled(b, rec)
	settled := time.Now()
	settleTook := settled.Sub(pushed)
	settleHeap := mem.peakHeap()

	// Two rounds of drift checks, nothing pushed.
	driftFrom := len(rec.snapshot())
	<-time.After(2 * simDrift)
	var driftStarts []time.Time
	checked := map[string]int{}
	for _, e := range rec.snapshot()[driftFrom:] {
		if e.Kind == gitops.EventReconcileStart && e.Trigger == "drift-check" {
			driftStarts = append(driftStarts, e.at)
			checked[e.Path]++
		}
		if e.Kind == gitops.EventReconcileEnd && e.Err != nil {
			b.Fatalf("drift check of %s: %v", e.Path, e.Err)
		}
	}
	if len(checked) < simClusters {
		b.Fatalf("in two drift intervals, %d of %d clusters were checked", len(checked), simClusters)
	}
	perTenth, driftCV, driftGap := driftSpread(driftStarts, simDrift)
	driftHeap := mem.peakHeap()

	// Pushes, each to one cluster.
	var toStart []time.Duration
	var split pushSplit
	for i := range simPushes {
		<-time.After(time.Second) // a push every 2 s or so: with its status commit's, the webhook's rate
		name := fleet.names[(i*7+3)%simClusters]
		toStart = append(toStart, pushOne(b, o, rec, fleet, name, i, nil, &split))
	}

	// One slow cluster: the others' pushes while it reconciles.
	slow := fleet.names[0]
	for i := range simNodesPerClus {
		fleet.ask(b, fmt.Sprintf("delay %s %s", simnode.Address(i), simSlowDelay))
	}
	slowPushed := time.Now()
	slowStart := pushOneStart(b, o, rec, fleet, slow, simPushes)
	var slowOthers []time.Duration
	var slowSplit pushSplit
	for i := range 5 {
		<-time.After(time.Second)
		name := fleet.names[(i*13+5)%simClusters]
		slowOthers = append(slowOthers, pushOne(b, o, rec, fleet, name, simPushes+1+i, &slowGuard{path: clusterFile(slow), from: slowStart}, &slowSplit))
	}
	e, _ := rec.wait(b, slowStart, 5*time.Minute, "the slow cluster's reconcile end", func(e timedEvent) bool {
		return e.Kind == gitops.EventReconcileEnd && e.Path == clusterFile(slow)
	})
	if e.Err != nil {
		b.Fatalf("the slow cluster's reconcile: %v", e.Err)
	}
	slowTook := e.at.Sub(slowPushed)
	for i := range simNodesPerClus {
		fleet.ask(b, fmt.Sprintf("delay %s 0s", simnode.Address(i)))
	}
	peakHeap, rss := mem.peakHeap(), peakRSS()

	const mb = 1 << 20
	slices.Sort(toStart)
	slices.Sort(slowOthers)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	b.ReportMetric(settleTook.Seconds(), "sim-settle-s")
	b.ReportMetric(float64(settleHeap)/mb, "sim-settled-heap-MB")
	b.ReportMetric(float64(driftHeap)/mb, "sim-drift-heap-MB")
	b.ReportMetric(float64(peakHeap)/mb, "sim-peak-heap-MB")
	b.ReportMetric(float64(rss)/mb, "sim-peak-rss-MB")
	b.ReportMetric(float64(len(driftStarts)), "sim-drift-checks")
	b.ReportMetric(driftCV, "sim-drift-tenths-cv")
	b.ReportMetric(driftGap, "sim-drift-longest-gap-share")
	b.ReportMetric(ms(toStart[len(toStart)/2]), "sim-push-to-start-ms")
	b.ReportMetric(ms(toStart[len(toStart)-1]), "sim-push-to-start-max-ms")
	b.ReportMetric(ms(slowOthers[len(slowOthers)-1]), "sim-slow-others-push-to-start-max-ms")
	b.ReportMetric(slowTook.Seconds(), "sim-slow-reconcile-s")

	// Printed, not logged: a benchmark's log shows only with -v.
	fmt.Printf("\nserve, %d clusters of %d simulated nodes, drift interval %s, MaxConcurrent %d (simulated):\n\n",
		simClusters, simNodesPerClus, simDrift, gitops.DefaultMaxConcurrent)
	fmt.Printf("| | measured | target |\n|---|---|---|\n")
	fmt.Printf("| settle: 100 clusters pushed → each reconciled once | %.1f s | |\n", settleTook.Seconds())
	fmt.Printf("| peak heap (HeapInuse), settled / across 2 drift rounds / whole run | %.1f / %.1f / %.1f MB | < 300 MB |\n",
		float64(settleHeap)/mb, float64(driftHeap)/mb, float64(peakHeap)/mb)
	fmt.Printf("| peak RSS of the serve process (VmHWM) | %.1f MB | < 300 MB |\n", float64(rss)/mb)
	fmt.Printf("| drift checks in 2 intervals | %d (of %d clusters) | every cluster |\n", len(driftStarts), len(checked))
	fmt.Printf("| drift checks per tenth of the interval (by start time mod interval) | %v | spread |\n", perTenth)
	fmt.Printf("| their coefficient of variation (0 even, about 0.2 at random, 3 all in one tenth) | %.2f | |\n", driftCV)
	fmt.Printf("| longest part of the interval in which no drift check starts | %.0f%% | |\n", driftGap*100)
	fmt.Printf("| push → reconcile start, webhook, median / max of %d | %.0f / %.0f ms | < 100 ms |\n",
		len(toStart), ms(toStart[len(toStart)/2]), ms(toStart[len(toStart)-1]))
	hookMs, fetchMs, startMs := split.medians()
	fmt.Printf("| of which, medians: push → webhook called / → fetched / → reconcile start | %.0f / %.0f / %.0f ms | |\n", hookMs, fetchMs, startMs)
	hookMs, fetchMs, startMs = split.slowest()
	fmt.Printf("| the slowest push: push → webhook called / → fetched / → reconcile start | %.0f / %.0f / %.0f ms | |\n", hookMs, fetchMs, startMs)
	fmt.Printf("| other clusters reconciled for a change by those pushes | 0 (checked) | 0 |\n")
	fmt.Printf("| webhook requests accepted in the run (pushes and status commits) | %d | |\n", webhooks.Load())
	fmt.Printf("| one slow cluster (Docker answers %s late): its push → reconcile end | %.1f s | |\n", simSlowDelay, slowTook.Seconds())
	fmt.Printf("| meanwhile, push → reconcile start of %d other clusters, max | %.0f ms | < 100 ms |\n",
		len(slowOthers), ms(slowOthers[len(slowOthers)-1]))
	hookMs, fetchMs, startMs = slowSplit.slowest()
	fmt.Printf("| the slowest of those: push → webhook called / → fetched / → reconcile start | %.0f / %.0f / %.0f ms | |\n\n", hookMs, fetchMs, startMs)
}

// pushSplit is where push → reconcile start goes: the push until the
// webhook is called (git push, its post-receive hook's curl), the webhook
// until the fetch is done (the fetch, the cluster files listed and read),
// the fetch until the reconcile starts (the worker handed the change, a
// reconcile slot, status.yml read).
type pushSplit struct {
	toHook, toFetched, toStart []time.Duration
}

func (s *pushSplit) add(hook, fetched, start time.Duration) {
	s.toHook, s.toFetched, s.toStart = append(s.toHook, hook), append(s.toFetched, fetched), append(s.toStart, start)
}

// slowest is the split of the push that took longest, in ms.
func (s *pushSplit) slowest() (hook, fetched, start float64) {
	worst := -1
	for i := range s.toHook {
		if worst < 0 || s.toHook[i]+s.toFetched[i]+s.toStart[i] > s.toHook[worst]+s.toFetched[worst]+s.toStart[worst] {
			worst = i
		}
	}
	if worst < 0 {
		return 0, 0, 0
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	return ms(s.toHook[worst]), ms(s.toFetched[worst]), ms(s.toStart[worst])
}

// medians are the medians of the three parts, in ms.
func (s *pushSplit) medians() (hook, fetched, start float64) {
	med := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1e3
	}
	return med(s.toHook), med(s.toFetched), med(s.toStart)
}

// slowGuard is a cluster that must still be reconciling when another
// cluster's reconcile starts: its reconcile started at event index from.
type slowGuard struct {
	path string
	from int
}

// pushOne changes the cluster.yml of name (a comment: a new blob, the
// same plan), pushes it and returns the time from the push to its
// reconcile's start; it waits for that reconcile's end, and fails if any
// other cluster reconciled for a change meanwhile, or, with guard, if the
// guard's cluster was no longer reconciling when this one started.
func pushOne(b *testing.B, o *origin, rec *eventLog, fleet *simFleet, name string, n int, guard *slowGuard, split *pushSplit) time.Duration {
	b.Helper()
	path := clusterFile(name)
	from := len(rec.snapshot())
	pushed := pushChange(b, o, fleet, name, n)
	start, next := rec.wait(b, from, time.Minute, "the reconcile of "+path, func(e timedEvent) bool {
		return e.Kind == gitops.EventReconcileStart && e.Path == path && e.Trigger == "change"
	})
	took := start.at.Sub(pushed)
	if split != nil {
		var hook, fetched time.Time
		for _, e := range rec.snapshot()[from:next] {
			switch {
			case e.Kind == eventWebhook && hook.IsZero() && !e.at.Before(pushed):
				hook = e.at
			case e.Kind == gitops.EventFetched && !hook.IsZero() && fetched.IsZero():
				fetched = e.at
			}
		}
		if !hook.IsZero() && !fetched.IsZero() {
			split.add(hook.Sub(pushed), fetched.Sub(hook), start.at.Sub(fetched))
		}
	}
	end, _ := rec.wait(b, next, 5*time.Minute, "the reconcile end of "+path, func(e timedEvent) bool {
		return e.Kind == gitops.EventReconcileEnd && e.Path == path
	})
	if end.Err != nil {
		b.Fatalf("reconcile of %s: %v", path, end.Err)
	}
	// The push's own status commit calls the webhook too: give the fetch
	// it causes time to hand the other workers the new head.
	<-time.After(300 * time.Millisecond)
	for _, e := range rec.snapshot()[from:] {
		if e.Kind == gitops.EventReconcileStart && e.Path != path && e.Trigger == "change" {
			b.Fatalf("a push to %s made %s reconcile for a change", path, e.Path)
		}
	}
	if guard != nil {
		for _, e := range rec.snapshot()[guard.from:next] {
			if e.Kind == gitops.EventReconcileEnd && e.Path == guard.path {
				b.Fatalf("the slow cluster %s ended its reconcile (%s after it started; error %v) before %s's started: the measure is not of a slow cluster",
					guard.path, e.at.Sub(rec.snapshot()[guard.from].at), e.Err, path)
			}
		}
	}
	return took
}

// pushOneStart pushes a change of name and returns the index of its
// reconcile's start event.
func pushOneStart(b *testing.B, o *origin, rec *eventLog, fleet *simFleet, name string, n int) int {
	b.Helper()
	path := clusterFile(name)
	from := len(rec.snapshot())
	pushChange(b, o, fleet, name, n)
	_, next := rec.wait(b, from, time.Minute, "the reconcile of "+path, func(e timedEvent) bool {
		return e.Kind == gitops.EventReconcileStart && e.Path == path && e.Trigger == "change"
	})
	return next - 1
}

// pushChange commits a change of the cluster.yml of name (a comment) and
// pushes it; it returns when the push started.
func pushChange(b *testing.B, o *origin, fleet *simFleet, name string, n int) time.Time {
	b.Helper()
	o.pull(b)
	o.commit(b, fmt.Sprintf("%s: push %d", name, n), map[string]string{clusterFile(name): fleet.yml[name] + fmt.Sprintf("# push %d\n", n)})
	pushed := time.Now()
	o.push(b)
	return pushed
}

func clusterFile(name string) string { return "clusters/" + name + "/" + gitops.ClusterFileName }

// driftSpread says how drift checks that started at starts spread over
// the interval, by their start times modulo the interval (their phase):
// the checks per tenth of the interval; the coefficient of variation of
// those counts (about 0.2 for 200 checks spread at random, 0 for even,
// 3 when all fall in one tenth); and the longest part of the interval in
// which no check starts, as a share of it (near 0 when spread, 0.9 or more
// when bunched in a tenth).
func driftSpread(starts []time.Time, interval time.Duration) (perTenth [10]int, cv, longestGap float64) {
	if len(starts) == 0 {
		return perTenth, 0, 1
	}
	phases := make([]time.Duration, len(starts))
	for i, s := range starts {
		phases[i] = time.Duration(s.UnixNano()) % interval
		perTenth[int(phases[i]*10/interval)]++
	}
	mean := float64(len(starts)) / 10
	var ss float64
	for _, n := range perTenth {
		ss += (float64(n) - mean) * (float64(n) - mean)
	}
	cv = math.Sqrt(ss/10) / mean
	slices.Sort(phases)
	gap := phases[0] + interval - phases[len(phases)-1] // around the end
	for i := 1; i < len(phases); i++ {
		gap = max(gap, phases[i]-phases[i-1])
	}
	return perTenth, cv, float64(gap) / float64(interval)
}

// newSimFleet writes the 100 clusters' cluster.yml, their key and their
// PKI, and starts their nodes in a child process, converged.
func newSimFleet(b *testing.B) *simFleet {
	b.Helper()
	var names []string
	for k := range simClusters {
		names = append(names, fmt.Sprintf("sim-%03d", k))
	}
	return startFleet(b, names, simPort, "TestSimulatedClustersProcess", simServeDirEnv)
}

// startFleet writes the cluster.yml of each of names (simNodesPerClus
// nodes each, on port), their key and their PKI, and starts their nodes in
// a child process running the test childTest, which finds them in the
// directory dirEnv names.
func startFleet(b *testing.B, names []string, port int, childTest, dirEnv string) *simFleet {
	b.Helper()
	dir := b.TempDir()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		b.Fatal(err)
	}
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		b.Fatal(err)
	}
	keyPath, kh := filepath.Join(dir, "id_ed25519"), filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(blk), 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(keyPath+".pub", ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o600); err != nil {
		b.Fatal(err)
	}
	f := &simFleet{dir: dir, yml: map[string]string{}}
	for k, name := range names {
		var yml strings.Builder
		fmt.Fprintf(&yml, "cluster_name: %s\nssh_key_path: %s\nrigger:\n  ssh:\n    known_hosts_file: %s\nnodes:\n", name, keyPath, kh)
		for i := range simNodesPerClus {
			fmt.Fprintf(&yml, "  - {address: %s, port: \"%d\", user: root, role: [etcd, controlplane, worker], hostname_override: %s-%d}\n",
				simnode.Address(k*simNodesPerClus+i), port, name, i)
		}
		file := filepath.Join(dir, "clusters", name, gitops.ClusterFileName)
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(yml.String()), 0o600); err != nil {
			b.Fatal(err)
		}
		c, diags, err := spec.Load(file)
		if err != nil {
			b.Fatalf("load %s: %v\n%v", file, err, diags)
		}
		set, _, err := pki.Ensure(nil, pki.RequestFor(c), time.Now())
		if err != nil {
			b.Fatal(err)
		}
		if err := pki.Save(filepath.Join(dir, "pki", name), set); err != nil {
			b.Fatal(err)
		}
		f.names = append(f.names, name)
		f.yml[name] = yml.String()
	}
	f.nodes, err = simnode.StartProcess(childTest, []string{dirEnv + "=" + dir}, 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.nodes.Close() })
	return f
}

// ask asks the nodes' process (simnode.Serve) and fails unless it says ok.
func (f *simFleet) ask(b *testing.B, request string) {
	b.Helper()
	if answer, err := f.nodes.Ask(request, 10*time.Second); err != nil || answer != "ok" {
		b.Fatalf("%s: the simulated nodes' process answered %q (%v)", request, answer, err)
	}
}

// open is the benchmark's gitops.Opener: a simSession on the cluster's
// simulated nodes.
func (f *simFleet) open(c *spec.Cluster, opts reconcile.Options) (gitops.Session, error) {
	tr, err := reach.Transport(c, nil, nil, false, opts.Answers, opts.Log)
	if err != nil {
		return nil, err
	}
	return &simSession{c: c, pkiDir: filepath.Join(f.dir, "pki", c.ClusterName), stateDir: opts.StateDir, now: opts.Now, tr: tr}, nil
}

// simSession is the nodes' part of a reconcile.Session on simulated nodes
// (simnode.Plan and simnode.Apply through an SSH transport of its own),
// with the cluster's lock file; it reads no etcd and no Kubernetes API.
type simSession struct {
	c                *spec.Cluster
	pkiDir, stateDir string
	now              func() time.Time
	tr               transport.Transport
	unlock           func() error
}

var _ gitops.Session = (*simSession)(nil)

// Lock takes the cluster's lock file, as reconcile.Session.Lock does; it
// is released by Close (a reconcile.Lock's release cannot be set from
// here), right after the worker's Release.
func (s *simSession) Lock(ctx context.Context, command string, wait bool) (*reconcile.Lock, error) {
	rel, err := lock.File(ctx, filepath.Join(s.stateDir, reconcile.LockFileName), lock.Me(command, s.now()), wait)
	if err != nil {
		return nil, err
	}
	s.unlock = rel
	return &reconcile.Lock{}, nil
}

func (s *simSession) RestoreRequest() (*etcdsnap.RestoreRequest, error) { return nil, nil }

func (s *simSession) RestorePending(context.Context, *reconcile.Lock, etcdsnap.RestoreOptions) (*etcdsnap.RestoreResult, error) {
	return nil, nil
}

func (s *simSession) Plan(ctx context.Context) (*decide.Planned, error) {
	set, err := pki.Load(s.pkiDir)
	if err != nil {
		return nil, err
	}
	return simnode.Plan(ctx, s.tr, s.c, set)
}

func (s *simSession) Apply(ctx context.Context, _ *reconcile.Lock, pl *decide.Planned, o reconcile.ApplyOptions) (*reconcile.Result, error) {
	res, err := simnode.Apply(ctx, s.tr, s.c, pl, o.Hooks, reconcile.MaxPlanAge)
	return &reconcile.Result{Result: *res}, err
}

// ScheduledSnapshot: the simulation runs no etcd, so no schedule.
func (s *simSession) ScheduledSnapshot(context.Context, *reconcile.Lock) (*etcdsnap.ScheduledResult, error) {
	return &etcdsnap.ScheduledResult{}, nil
}

func (s *simSession) Close() error {
	if s.unlock != nil {
		_ = s.unlock()
	}
	return s.tr.Close()
}

// TestSimulatedClustersProcess is the child process of
// BenchmarkServeSimulated: it starts the nodes of every cluster.yml under
// $RIGGER_SIMSERVE_DIR/clusters, converged, writes their known_hosts, and
// answers simnode.Serve's requests until its standard input closes.
func TestSimulatedClustersProcess(t *testing.T) {
	dir := os.Getenv(simServeDirEnv)
	if dir == "" {
		t.Skip("the child process of BenchmarkServeSimulated")
	}
	serveFleet(t, dir, simPort, func(string) bool { return true }, nil)
}

// serveFleet is a fleet's child process: it starts the nodes of every
// cluster.yml under dir/clusters on port, converges those of the clusters
// converge says, writes their known_hosts, and answers
// simnode.ServeWith's requests (extra: its own) until its standard input
// closes.
func serveFleet(t *testing.T, dir string, port int, converge func(cluster string) bool, extra func([]string) (string, bool)) {
	key, err := simnode.ChildKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "clusters", "*", gitops.ClusterFileName))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cluster.yml under %s: %v", dir, err)
	}
	sim, err := simnode.Start(simnode.Options{Nodes: len(files) * simNodesPerClus, Port: port, User: "root", AuthorizedKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	byAddress := map[string]*simnode.Node{}
	for _, n := range sim.Nodes {
		byAddress[n.Address] = n
	}
	kh := ""
	for _, file := range files {
		c, diags, err := spec.Load(file)
		if err != nil {
			t.Fatalf("%v\n%v", err, diags)
		}
		set, err := pki.Load(filepath.Join(dir, "pki", c.ClusterName))
		if err != nil {
			t.Fatal(err)
		}
		d, err := simnode.Desired(c, set)
		if err != nil {
			t.Fatal(err)
		}
		for _, dn := range d.Nodes {
			n := byAddress[dn.Address]
			if n == nil {
				t.Fatalf("%s: no simulated node %s", c.ClusterName, dn.Address)
			}
			if converge(c.ClusterName) {
				simnode.Converge(n.Engine, c, dn)
			}
		}
		kh = c.Rigger.SSH.KnownHostsFile
	}
	if err := os.WriteFile(kh+".tmp", sim.KnownHosts(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kh+".tmp", kh); err != nil {
		t.Fatal(err)
	}
	if err := simnode.ServeWith(sim, os.Stdin, os.Stdout, time.Minute, extra); err != nil {
		t.Fatal(err)
	}
}

// eventWebhook is a webhook request accepted, in the benchmark's event log.
const eventWebhook gitops.EventKind = "webhook"

// timedEvent is a server's event and when it came.
type timedEvent struct {
	gitops.Event
	at time.Time
}

// eventLog records a server's events (Config.Events), never blocking it.
type eventLog struct {
	mu     sync.Mutex
	events []timedEvent
	wake   chan struct{}
}

func (l *eventLog) add(e gitops.Event) {
	at := time.Now()
	l.mu.Lock()
	l.events = append(l.events, timedEvent{Event: e, at: at})
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *eventLog) snapshot() []timedEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// wait returns the first event from index from on that matches, and the
// index after it; it fails the benchmark when none comes within timeout.
func (l *eventLog) wait(b *testing.B, from int, timeout time.Duration, what string, match func(timedEvent) bool) (timedEvent, int) {
	b.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		events := l.snapshot()
		for i := from; i < len(events); i++ {
			if match(events[i]) {
				return events[i], i + 1
			}
		}
		from = len(events)
		select {
		case <-l.wake:
		case <-deadline.C:
			var last []string
			for _, e := range events[max(0, len(events)-300):] {
				if e.Kind != gitops.EventFetched && e.Kind != gitops.EventStatusWritten && e.Trigger != "change" {
					continue
				}
				last = append(last, fmt.Sprintf("%s %s %s %s %.12s %v", e.at.Format("15:04:05.000"), e.Kind, e.Path, e.Trigger, e.Revision, e.Err))
			}
			b.Fatalf("waited %s for %s; the fetches, status commits and changes of the last events:\n%s", timeout, what, strings.Join(last, "\n"))
		}
	}
}

// memSampler keeps the peak of HeapInuse, sampled every 20 ms.
type memSampler struct {
	peak atomic.Uint64
	done chan struct{}
	once sync.Once
}

func startMemSampler() *memSampler {
	m := &memSampler{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-m.done:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > m.peak.Load() {
					m.peak.Store(ms.HeapInuse)
				}
			}
		}
	}()
	return m
}

func (m *memSampler) peakHeap() uint64 { return m.peak.Load() }

func (m *memSampler) stop() { m.once.Do(func() { close(m.done) }) }

// peakRSS is this process's peak resident set (VmHWM), in bytes; 0 when
// /proc does not say.
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
