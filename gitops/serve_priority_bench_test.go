package gitops_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/gitops/webhook"
	"github.com/rigger/rigger/reconcile/simnode"
)

// The shape of BenchmarkServeSimulatedPriority.
const (
	// prioPort keeps its nodes apart from the other benchmarks'.
	prioPort = 22328
	// prioDrift is the drift interval: each cluster's drift check comes
	// due within it.
	prioDrift = 20 * time.Second
	// prioDelay is how late every node answers each Docker API request
	// once the fleet has settled: a drift check then holds its slot for
	// seconds, and the drift checks queue up.
	prioDelay = 500 * time.Millisecond
	// prioQueued is how many drift checks wait for a slot when the
	// person pushes.
	prioQueued = 40
	// prioOwnPushes is how many pushes of serve's own status commits the
	// forge delivers before the person's push, at least.
	prioOwnPushes = 100
	prioDirEnv    = "RIGGER_SIMPRIO_DIR"
)

// BenchmarkServeSimulatedPriority is BenchmarkServeSimulated's fleet (100
// clusters of 3 simulated nodes, serve with its defaults: MaxConcurrent 4,
// the webhook's rate of 1 a second, bursts of 10) in the two situations in
// which a person's push could wait behind serve's own work:
//
//   - own commits: a forge (this benchmark) delivers a GitHub push event
//     for every status commit serve pushes, as GitHub does, the 100 of the
//     settle at least; then a person's push, delivered at once: its
//     webhook answer and push → reconcile start;
//   - drift checks: every node answers each Docker request prioDelay late,
//     so that each drift check holds its slot for seconds and, with a
//     drift interval of 20 s, they queue up behind the 4 slots; once
//     prioQueued wait, a person's push of one cluster.yml: push →
//     reconcile start, how many drift checks were queued then, and how
//     many of them started before it (0 wanted).
//
// It runs alone (-bench BenchmarkServeSimulatedPriority) or with
// BenchmarkServeSimulated (make bench-serve).
func BenchmarkServeSimulatedPriority(b *testing.B) {
	needOpenFiles(b)
	for b.Loop() {
		benchServePriority(b)
	}
}

func benchServePriority(b *testing.B) {
	var names []string
	for k := range simClusters {
		names = append(names, fmt.Sprintf("prio-%03d", k))
	}
	fleet := startFleet(b, names, prioPort, "TestSimulatedPriorityProcess", prioDirEnv)
	rec := &eventLog{wake: make(chan struct{}, 1)}

	// The origin's hook calls nothing: the benchmark is the forge, and
	// delivers GitHub push events itself, for serve's pushes and people's.
	o := newOrigin(b, freePort(b))
	repo, err := gitrepo.Open(context.Background(), filepath.Join(b.TempDir(), "clone"), "file://"+o.bare, gitrepo.Auth{})
	if err != nil {
		b.Fatal(err)
	}
	forge := &simForge{o: o, results: map[string]int{}}
	srv, err := gitops.New(gitops.Config{Repo: repo, Branch: "main", Path: "clusters", StateDir: b.TempDir(),
		Interval: time.Hour, DriftInterval: prioDrift,
		Author: object.Signature{Name: "rigger-bench", Email: "rigger@example.test"},
		Open:   fleet.open, Events: func(e gitops.Event) {
			rec.add(e)
			if e.Kind == gitops.EventStatusWritten {
				forge.echo(e.Revision) // GitHub sends a push event for serve's push too
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	h, err := webhook.New(webhook.Config{Secret: []byte(secret), Branch: "main",
		Own: srv.OwnCommit, OwnMessage: gitops.IsStatusMessage, Observe: forge.observe,
		Trigger: func(webhook.Event) {
			rec.add(gitops.Event{Kind: eventWebhook})
			srv.Trigger()
		}})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(webhook.Path([]byte(secret)), h)
	ts := httptest.NewServer(mux)
	defer ts.Close()
	forge.url = ts.URL + webhook.Path([]byte(secret))
	forge.start(b)
	defer forge.stop()

	files := map[string]string{}
	for _, name := range fleet.names {
		files[clusterFile(name)] = fleet.yml[name]
	}
	o.commit(b, "100 clusters", files)
	o.push(b)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// Settle: every cluster reconciled once; each status commit comes
	// back as a push event.
	waitSettled(b, rec)

	// Own commits, then a person's push.
	if forge.echoed() == 0 {
		b.Fatal("the settle made no status commit")
	}
	for i := 0; forge.echoed() < prioOwnPushes; i++ {
		forge.echo(forge.hashes()[i]) // a forge's redelivery: a new delivery of the same push
	}
	ownSent := forge.echoed()
	forge.waitResults(b, webhook.ResultOwn, ownSent, time.Minute)
	own := forge.snapshot()
	name := fleet.names[42]
	evFrom := len(rec.snapshot())
	pushed := pushChange(b, o, fleet, name, 1)
	code := forge.deliver(b, o.head(b), "scale "+name)
	start, _ := rec.wait(b, evFrom, time.Minute, "the reconcile of the person's push", func(e timedEvent) bool {
		return e.Kind == gitops.EventReconcileStart && e.Path == clusterFile(name) && e.Trigger == "change"
	})
	personToStart := start.at.Sub(pushed)
	if code != http.StatusAccepted {
		b.Fatalf("the person's push after %d of serve's own: webhook status %d, want 202 at once", own[webhook.ResultOwn], code)
	}
	if n := own[webhook.ResultRateLimited]; n > 0 {
		b.Fatalf("%d of serve's own pushes were rate limited: they spent the budget of people's pushes", n)
	}

	// Drift checks holding every slot, many waiting; then a person's push.
	for i := range simClusters * simNodesPerClus {
		fleet.ask(b, fmt.Sprintf("delay %s %s", simnode.Address(i), prioDelay))
	}
	delayed := len(rec.snapshot())
	var queuedAtPush []string
	most := 0
	deadline := time.NewTimer(2 * prioDrift)
	for len(queuedAtPush) < prioQueued {
		select {
		case <-rec.wake: // the queue changes only with an event
		case <-deadline.C:
			b.Fatalf("waited %s for %d drift checks waiting for a slot: at most %d waited; the drift checks held their slot %v",
				2*prioDrift, prioQueued, most, driftHeld(rec.snapshot()[delayed:]))
		}
		queuedAtPush = queuedDriftChecks(rec.snapshot()[delayed:])
		most = max(most, len(queuedAtPush))
	}
	deadline.Stop()
	target := ""
	for _, n := range fleet.names { // a cluster neither reconciling nor waiting
		if p := clusterFile(n); !slices.Contains(queuedAtPush, p) && !reconciling(rec.snapshot()[delayed:], p) {
			target = n
			break
		}
	}
	if target == "" {
		b.Fatal("every cluster is reconciling or waiting: no cluster to push")
	}
	evFrom = len(rec.snapshot())
	queuedAtPush = queuedDriftChecks(rec.snapshot()[delayed:])
	pushed = pushChange(b, o, fleet, target, 2)
	forge.deliver(b, o.head(b), "scale "+target)
	start, next := rec.wait(b, evFrom, 2*time.Minute, "the reconcile of the push behind the drift checks", func(e timedEvent) bool {
		return e.Kind == gitops.EventReconcileStart && e.Path == clusterFile(target) && e.Trigger == "change"
	})
	pushToStart := start.at.Sub(pushed)
	// Until serve has fetched the push it cannot know of it: the drift
	// checks that start meanwhile are not overtaken, they came first.
	overtaken, beforeFetch, hooked, fetched, slotFreed := 0, 0, false, false, time.Time{}
	var hookAt, fetchedAt time.Time
	for _, e := range rec.snapshot()[evFrom:next] {
		switch {
		case e.Kind == eventWebhook && !hooked:
			hooked, hookAt = true, e.at
		case e.Kind == gitops.EventFetched && hooked && !fetched:
			fetched, fetchedAt = true, e.at
		case e.Kind == gitops.EventReconcileStart && slices.Contains(queuedAtPush, e.Path) && fetched:
			overtaken++
		case e.Kind == gitops.EventReconcileStart && slices.Contains(queuedAtPush, e.Path):
			beforeFetch++
		case e.Kind == gitops.EventReconcileEnd && slotFreed.IsZero() && fetched:
			slotFreed = e.at
		}
	}
	held := driftHeld(rec.snapshot()[delayed:])
	for i := range simClusters * simNodesPerClus {
		fleet.ask(b, fmt.Sprintf("delay %s 0s", simnode.Address(i)))
	}
	if overtaken > 0 {
		b.Fatalf("%d of the %d drift checks queued at the push started after serve fetched it, before its reconcile", overtaken, len(queuedAtPush))
	}

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	heldMedian := time.Duration(0)
	if len(held) > 0 {
		heldMedian = held[len(held)/2]
	}
	b.ReportMetric(float64(own[webhook.ResultOwn]), "prio-own-pushes")
	b.ReportMetric(float64(own[webhook.ResultRateLimited]), "prio-own-rate-limited")
	b.ReportMetric(ms(personToStart), "prio-after-own-push-to-start-ms")
	b.ReportMetric(float64(len(queuedAtPush)), "prio-drift-queued")
	b.ReportMetric(ms(pushToStart), "prio-push-to-start-ms")
	b.ReportMetric(float64(overtaken), "prio-drift-before-push")
	b.ReportMetric(float64(beforeFetch), "prio-drift-before-fetch")
	b.ReportMetric(ms(heldMedian), "prio-drift-check-ms")

	fmt.Printf("\nserve, %d clusters of %d simulated nodes, MaxConcurrent %d, webhook rate 1/s bursts of 10 (simulated):\n\n",
		simClusters, simNodesPerClus, gitops.DefaultMaxConcurrent)
	fmt.Printf("| | measured | target |\n|---|---|---|\n")
	fmt.Printf("| pushes of serve's own status commits delivered (GitHub's payload) / answered as serve's own / rate limited | %d / %d / %d | all own, none limited |\n",
		ownSent, own[webhook.ResultOwn], own[webhook.ResultRateLimited])
	fmt.Printf("| then a person's push: webhook answer / push → reconcile start | %d / %.0f ms | 202 at once |\n", code, ms(personToStart))
	fmt.Printf("| drift checks waiting for a slot when a person pushes (every node %s late a Docker call) | %d | many |\n", prioDelay, len(queuedAtPush))
	fmt.Printf("| a drift check's time in its slot, median of %d | %.0f ms | |\n", len(held), ms(heldMedian))
	fmt.Printf("| push → reconcile start behind them / push → the first slot freed after serve fetched the push | %.0f / %.0f ms | the first slot |\n",
		ms(pushToStart), ms(slotFreed.Sub(pushed)))
	fmt.Printf("| of which: push → webhook called / → fetched / → reconcile start | %.0f / %.0f / %.0f ms | |\n",
		ms(hookAt.Sub(pushed)), ms(fetchedAt.Sub(hookAt)), ms(start.at.Sub(fetchedAt)))
	fmt.Printf("| queued drift checks that started after serve fetched the push, before its reconcile / before the fetch | %d / %d | 0 / any |\n", overtaken, beforeFetch)
	fmt.Printf("| in FIFO order, the push would have waited about (queued ÷ %d slots × a drift check) | %.1f s | |\n\n",
		gitops.DefaultMaxConcurrent, float64(len(queuedAtPush))/float64(gitops.DefaultMaxConcurrent)*heldMedian.Seconds())
}

// queuedDriftChecks are the clusters whose drift check waits for a slot
// at the end of events: a waiting event for it with no start since.
func queuedDriftChecks(events []timedEvent) []string {
	waiting := map[string]bool{}
	for _, e := range events {
		switch {
		case e.Kind == gitops.EventReconcileWaiting && e.Trigger == "drift-check":
			waiting[e.Path] = true
		case e.Kind == gitops.EventReconcileStart:
			delete(waiting, e.Path)
		}
	}
	var paths []string
	for p := range waiting {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// driftHeld is how long each drift check that ended in events held its
// slot, sorted.
func driftHeld(events []timedEvent) []time.Duration {
	var held []time.Duration
	began := map[string]time.Time{}
	for _, e := range events {
		switch {
		case e.Kind == gitops.EventReconcileStart && e.Trigger == "drift-check":
			began[e.Path] = e.at
		case e.Kind == gitops.EventReconcileEnd && !began[e.Path].IsZero():
			held = append(held, e.at.Sub(began[e.Path]))
			delete(began, e.Path)
		}
	}
	slices.Sort(held)
	return held
}

// reconciling says whether path's reconcile started in events and has not
// ended.
func reconciling(events []timedEvent, path string) bool {
	on := false
	for _, e := range events {
		if e.Path == path {
			switch e.Kind {
			case gitops.EventReconcileStart:
				on = true
			case gitops.EventReconcileEnd:
				on = false
			}
		}
	}
	return on
}

// simForge delivers GitHub push events to serve's webhook: one for each
// status commit serve pushed (echo, in the background, in order), and a
// person's (deliver).
type simForge struct {
	o     *origin
	url   string
	queue chan string
	wg    sync.WaitGroup
	seq   atomic.Int64
	sent  atomic.Int64

	mu      sync.Mutex
	results map[string]int
	pushed  []string
	changed chan struct{}
}

func (f *simForge) start(b *testing.B) {
	f.queue, f.changed = make(chan string, 4096), make(chan struct{}, 1)
	f.wg.Go(func() {
		for hash := range f.queue {
			// GitHub lists the pushed commits with their messages.
			msg := strings.TrimSpace(run(b, f.o.bare, "git", "log", "-1", "--format=%B", hash))
			f.post(b, hash, msg)
		}
	})
}

func (f *simForge) stop() {
	close(f.queue)
	f.wg.Wait()
}

// echo queues the push event of serve's push of hash.
func (f *simForge) echo(hash string) {
	f.sent.Add(1)
	f.mu.Lock()
	f.pushed = append(f.pushed, hash)
	f.mu.Unlock()
	f.queue <- hash
}

// hashes are the commits echoed so far.
func (f *simForge) hashes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pushed)
}

func (f *simForge) echoed() int { return int(f.sent.Load()) }

// deliver sends a person's push of after at once and returns the answer's
// status.
func (f *simForge) deliver(b *testing.B, after, message string) int {
	return f.post(b, after, message)
}

// post sends one push event, as GitHub does: signed, with a delivery ID.
func (f *simForge) post(b *testing.B, after, message string) int {
	body := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"deleted":false,"commits":[{"id":%q,"message":%q}],"repository":{"full_name":"acme/clusters"}}`,
		after, after, message)
	req, err := http.NewRequest(http.MethodPost, f.url, strings.NewReader(body))
	if err != nil {
		b.Error(err)
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("bench-%d", f.seq.Add(1)))
	req.Header.Set("X-Hub-Signature-256", webhook.Sign([]byte(secret), []byte(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// observe is the webhook's Config.Observe.
func (f *simForge) observe(_, result string) {
	f.mu.Lock()
	f.results[result]++
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *simForge) snapshot() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]int{}
	for k, v := range f.results {
		m[k] = v
	}
	return m
}

// waitResults waits until the webhook answered n requests with result.
func (f *simForge) waitResults(b *testing.B, result string, n int, timeout time.Duration) {
	b.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for f.snapshot()[result] < n {
		select {
		case <-f.changed:
		case <-deadline.C:
			b.Fatalf("waited %s for %d webhook answers %q; answers: %v", timeout, n, result, f.snapshot())
		}
	}
}

// TestSimulatedPriorityProcess is the child process of
// BenchmarkServeSimulatedPriority: the nodes of its fleet.
func TestSimulatedPriorityProcess(t *testing.T) {
	dir := os.Getenv(prioDirEnv)
	if dir == "" {
		t.Skip("the child process of BenchmarkServeSimulatedPriority")
	}
	serveFleet(t, dir, prioPort, func(string) bool { return true }, nil)
}
