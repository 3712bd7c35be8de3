package gitops

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/rigger/rigger/gitops/gitrepo"
	"github.com/rigger/rigger/gitops/replicas"
	"github.com/rigger/rigger/gitops/webhook"
	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/internal/ctxwait"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/spec"
)

// shareReplicaEnv carries the replicaConfig of a replica process of
// TestShareReplicas.
const shareReplicaEnv = "RIGGER_TEST_SHARE_REPLICA"

// replicaConfig is what one replica process of TestShareReplicas runs.
type replicaConfig struct {
	Kubeconfig, Namespace, Group, ID string
	Bare, Workdir, StateDir, Record  string
	Port                             int
	Secret                           string
	// Duration, RenewDeadline, RetryPeriod are the Leases' timing.
	Duration, RenewDeadline, RetryPeriod time.Duration
}

// Lease timing of TestShareReplicas: Duration > RenewDeadline + 1 s + 3 ×
// RetryPeriod, as replicas.New asks.
var shareTiming = lock.LeaseTiming{Duration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}

// TestShareReplicaProcess is one replica of TestShareReplicas, in a
// process of its own (so that it can be killed with SIGKILL): a gitops
// Server whose sessions take 150 ms a reconcile and stop at once when
// cancelled, sharing the clusters through replicas.Set, with a webhook
// endpoint that relays accepted pushes. It records the start and end of
// every reconcile in its record file.
func TestShareReplicaProcess(t *testing.T) {
	raw := os.Getenv(shareReplicaEnv)
	if raw == "" {
		t.Skip("a replica of TestShareReplicas, run by it")
	}
	var c replicaConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := runReplica(ctx, c); err != nil {
		t.Fatal(err)
	}
}

func runReplica(ctx context.Context, c replicaConfig) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	set, err := replicas.New(replicas.Config{Client: client, Namespace: c.Namespace, Group: c.Group, ID: c.ID,
		Address: fmt.Sprintf("http://127.0.0.1:%d", c.Port), Log: log,
		Timing: lock.LeaseTiming{Duration: c.Duration, RenewDeadline: c.RenewDeadline, RetryPeriod: c.RetryPeriod}})
	if err != nil {
		return err
	}
	repo, err := gitrepo.Open(ctx, c.Workdir, "file://"+c.Bare, gitrepo.Auth{})
	if err != nil {
		return err
	}
	rec, err := os.OpenFile(c.Record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer rec.Close()
	var recMu sync.Mutex
	board := NewBoard(0) // the status page's
	srv, err := New(Config{Board: board, Repo: repo, RepoURL: "file://" + c.Bare, Branch: "main", Path: "clusters",
		Interval: time.Hour, DriftInterval: time.Second, MaxConcurrent: 9, StateDir: c.StateDir,
		Author: object.Signature{Name: "rigger", Email: "rigger@example.test"}, Log: log, Share: set,
		Open: func(*spec.Cluster, reconcile.Options) (Session, error) { return &slowSession{}, nil },
		Events: func(e Event) {
			if e.Kind != EventReconcileStart && e.Kind != EventReconcileEnd {
				return
			}
			recMu.Lock()
			defer recMu.Unlock()
			end := "-"
			switch {
			case errors.Is(e.Err, context.Canceled):
				end = "cancelled"
			case e.Err != nil:
				end = "failed"
			}
			fmt.Fprintf(rec, "%s %s %d %s %s\n", e.Kind, e.Path, time.Now().UnixNano(), cmp.Or(e.Trigger, "-"), end)
		}})
	if err != nil {
		return err
	}
	// The test's post-receive hook sends one signed body for every push,
	// without the new head (a forge names it as "after"), so rigger's own
	// status commits are not told apart and count against the rate: with
	// the default rate (a burst of 10, then 1 a second) a person's push
	// among a burst of them is fetched late, and by serve-a only.
	hook, err := webhook.New(webhook.Config{Secret: []byte(c.Secret), Branch: "main", Log: log, Rate: 50, Burst: 100,
		Trigger: func(webhook.Event) { srv.Trigger() }, Own: srv.OwnCommit, OwnMessage: IsStatusMessage,
		Relay: func(path string, h http.Header, body []byte) { set.Relay(ctx, nil, path, h, body) }})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(webhook.Path([]byte(c.Secret)), hook)
	mux.HandleFunc("/board", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(board.Clusters())
	})
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port))
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return set.Run(gctx) })
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error {
		if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		return hs.Close()
	})
	return g.Wait()
}

// slowSession is a cluster in sync whose plan takes 150 ms, and stops at
// once when its context ends, as a reconcile stops between steps.
type slowSession struct{ fakeSession }

func (s *slowSession) Plan(ctx context.Context) (*decide.Planned, error) {
	if err := ctxwait.Sleep(ctx, 150*time.Millisecond); err != nil {
		return nil, err
	}
	return planned(0), nil
}

// leaseSeen is one state of a cluster's Lease as the watcher saw it.
type leaseSeen struct {
	at     time.Time
	name   string
	path   string
	holder string
	// renew and acquire are the Lease's own times: written by its
	// holders, all on this machine's clock.
	renew, acquire time.Time
}

// leaseWatcher keeps every state of the clusters' Leases, as a watch
// delivers them.
type leaseWatcher struct {
	mu   sync.Mutex
	seen []leaseSeen
	now  map[string]leaseSeen // by Lease name
}

func watchLeases(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, group string) *leaseWatcher {
	w := &leaseWatcher{now: map[string]leaseSeen{}}
	sel := labels.Set{replicas.LabelCluster: group}.String()
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.LabelSelector = sel
		return client.CoordinationV1().Leases(ns).Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, "1", lw)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-rw.ResultChan():
				if !ok {
					return
				}
				l, ok := ev.Object.(*coordinationv1.Lease)
				if !ok {
					continue
				}
				s := leaseSeen{at: time.Now(), name: l.Name, path: l.Annotations[replicas.AnnotationPath]}
				if h := l.Spec.HolderIdentity; h != nil && ev.Type != watch.Deleted {
					s.holder = *h
				}
				if r := l.Spec.RenewTime; r != nil {
					s.renew = r.Time
				}
				if a := l.Spec.AcquireTime; a != nil {
					s.acquire = a.Time
				}
				w.mu.Lock()
				w.seen = append(w.seen, s)
				w.now[s.name] = s
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// holders are the holders of the clusters' Leases now, by path.
func (w *leaseWatcher) holders() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for _, s := range w.now {
		out[s.path] = s.holder
	}
	return out
}

// takenAt is when the watcher first saw path's Lease held by one of ids
// after since; zero if it has not.
func (w *leaseWatcher) takenAt(path string, since time.Time, ids ...string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.seen {
		if s.path == path && s.at.After(since) && slices.Contains(ids, s.holder) {
			return s.at
		}
	}
	return time.Time{}
}

// TestShareReplicas (RIGGER_E2E=1: a real API server) runs three replicas
// as processes sharing nine clusters, and checks, with a watcher of the
// clusters' Leases and each replica's record of its reconciles:
//   - the clusters spread three each, each Lease held by a live replica;
//   - a fourth replica that comes takes its share (two or three each),
//     the others handing clusters over without cutting a reconcile short;
//   - a push reaching one replica's webhook is applied by the holder of
//     the cluster it changed, which another replica is: the webhook was
//     relayed;
//   - a replica killed with SIGKILL loses its clusters to the others
//     within the lease duration and a few retry periods, and no sooner
//     than its Leases expired;
//   - a replica stopped with SIGTERM hands its clusters over at once:
//     sooner than a lease duration, so by giving them up;
//   - a Lease's holder changes only by a release (no holder between the
//     two) or once the holder stopped renewing it for a lease duration;
//   - no cluster is ever reconciled by two replicas at once.
func TestShareReplicas(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	kubeconfig := api.WriteKubeconfig(t)
	client, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	const ns, group, secretText = "rigger-system", "rigger-serve", "a webhook secret of the test, long enough"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ids := []string{"serve-a", "serve-b", "serve-c", "serve-d"}
	ports := map[string]int{}
	for _, id := range ids {
		ports[id] = freeTCPPort(t)
	}

	// The repository: nine clusters; a push calls serve-a's webhook.
	dir := t.TempDir()
	bare, work := filepath.Join(dir, "origin.git"), filepath.Join(dir, "work")
	gitRun(t, dir, "init", "-q", "--bare", "-b", "main", bare)
	body := `{"ref":"refs/heads/main"}`
	hook := fmt.Sprintf("#!/bin/sh\ncurl -s -o /dev/null -m 5 -X POST -H 'Content-Type: application/json' "+
		"-H 'X-Rigger-Signature-256: %s' --data '%s' http://127.0.0.1:%d%s || true\n",
		webhook.Sign([]byte(secretText), []byte(body)), body, ports["serve-a"], webhook.Path([]byte(secretText)))
	if err := os.WriteFile(filepath.Join(bare, "hooks", "post-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, "clone", "-q", bare, work)
	gitRun(t, work, "checkout", "-q", "-b", "main")
	var paths []string
	for i := range 9 {
		p := fmt.Sprintf("clusters/c%d/cluster.yml", i)
		paths = append(paths, p)
		writeFile(t, filepath.Join(work, p), strings.Replace(validYML, "cluster_name: c", fmt.Sprintf("cluster_name: c%d", i), 1))
	}
	gitRun(t, work, "add", ".")
	gitRun(t, work, "commit", "-q", "-m", "nine clusters")
	gitRun(t, work, "push", "-q", "origin", "main")

	w := watchLeases(ctx, t, client, ns, group)
	procs := map[string]*replicaProc{}
	launch := func(id string) {
		procs[id] = startReplica(t, replicaConfig{Kubeconfig: kubeconfig, Namespace: ns, Group: group, ID: id,
			Bare: bare, Workdir: filepath.Join(dir, id, "clone"), StateDir: filepath.Join(dir, id, "state"),
			Record: filepath.Join(dir, id, "record"), Port: ports[id], Secret: secretText,
			Duration: shareTiming.Duration, RenewDeadline: shareTiming.RenewDeadline, RetryPeriod: shareTiming.RetryPeriod})
	}
	live := []string{"serve-a", "serve-b", "serve-c"}
	for _, id := range live {
		launch(id)
	}
	spread := func(want map[int]bool) func() error {
		return func() error {
			h := w.holders()
			count := map[string]int{}
			for _, p := range paths {
				if !slices.Contains(live, h[p]) {
					return fmt.Errorf("%s held by %q, not by a live replica %v", p, h[p], live)
				}
				count[h[p]]++
			}
			for _, id := range live {
				if !want[count[id]] {
					return fmt.Errorf("clusters by replica %v, want each of %v to hold one of %v", count, live, slices.Sorted(maps.Keys(want)))
				}
			}
			return nil
		}
	}
	testwait.For(t, 2*time.Minute, "the nine clusters spread three each", spread(map[int]bool{3: true}))

	t.Run("a push to one replica's webhook is applied by the cluster's holder", func(t *testing.T) {
		h := w.holders()
		var path string
		for _, p := range paths {
			if h[p] != "serve-a" {
				path = p
				break
			}
		}
		holder := procs[h[path]]
		was, err := os.ReadFile(filepath.Join(work, path))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(work, path), string(was)+"# changed\n")
		gitRun(t, work, "commit", "-q", "-am", "change "+path)
		for try := 0; ; try++ { // rigger's status commits may come first
			if _, err := gitTry(work, "push", "-q", "origin", "main"); err == nil {
				break
			} else if try == 5 {
				t.Fatal(err)
			}
			gitRun(t, work, "pull", "-q", "--rebase", "origin", "main")
		}
		testwait.For(t, 30*time.Second, holder.id+" reconciling the change of "+path+" (--interval is an hour: only the relayed webhook makes it fetch)", func() bool {
			return slices.ContainsFunc(holder.records(t), func(r reconcileRecord) bool { return r.path == path && r.trigger == "change" })
		})
	})

	t.Run("every replica's page shows every cluster, each held elsewhere with its holder", func(t *testing.T) {
		check := func() error {
			h := w.holders()
			for _, id := range live {
				cs, err := boardOf(ports[id])
				if err != nil {
					return err
				}
				if len(cs) != len(paths) {
					return fmt.Errorf("%s's page shows %d clusters, want %d", id, len(cs), len(paths))
				}
				for _, c := range cs {
					switch {
					case h[c.Path] == id && c.Elsewhere:
						return fmt.Errorf("%s's page shows %s, which it holds, as held by %q", id, c.Path, c.HeldBy)
					case h[c.Path] != id && (!c.Elsewhere || c.HeldBy != h[c.Path]):
						return fmt.Errorf("%s's page shows %s as elsewhere %v held by %q, want held by %s", id, c.Path, c.Elsewhere, c.HeldBy, h[c.Path])
					case c.Status == nil || c.Status.Replica != h[c.Path]:
						return fmt.Errorf("%s's page shows no status.yml of %s written by its holder %s: %+v", id, c.Path, h[c.Path], c.Status)
					}
				}
			}
			return nil
		}
		// Each round, a commit that changes no cluster.yml: every replica
		// fetches (the webhook is relayed), reads the Leases again and
		// the status.yml files the holders committed before it.
		fetched(t, work, 30*time.Second, "every replica's page showing the nine clusters, who holds each, and its status.yml", check)
	})

	t.Run("a replica that comes takes its share, handed over without cutting a reconcile short", func(t *testing.T) {
		came := time.Now()
		launch("serve-d")
		live = []string{"serve-a", "serve-b", "serve-c", "serve-d"}
		testwait.For(t, 2*time.Minute, "the nine clusters spread over four replicas", spread(map[int]bool{2: true, 3: true}))
		for _, p := range procs {
			for _, r := range p.records(t) {
				if r.cancelled && r.at.After(came) {
					t.Errorf("%s: a reconcile of %s cut short at %s, after serve-d came: a hand-over waits for it", p.id, r.path, r.at.Format(time.StampMilli))
				}
			}
		}
	})

	t.Run("a replica killed with SIGKILL loses its clusters within the lease duration", func(t *testing.T) {
		victim := procs["serve-c"]
		mine := heldBy(w.holders(), victim.id)
		killed := time.Now()
		victim.signal(t, syscall.SIGKILL)
		live = []string{"serve-a", "serve-b", "serve-d"}
		testwait.For(t, 2*time.Minute, "the nine clusters spread over the three live replicas", spread(map[int]bool{3: true}))
		bound := shareTiming.Duration + 3*shareTiming.RetryPeriod + time.Second
		for _, p := range mine {
			took := w.takenAt(p, killed, live...).Sub(killed)
			if took > bound {
				t.Errorf("%s taken over %s after the kill of its holder, want within %s (the lease duration and a few retry periods)", p, took, bound)
			}
			t.Logf("%s taken over %s after the kill", p, took.Round(10*time.Millisecond))
		}
	})

	t.Run("a replica stopped with SIGTERM hands its clusters over at once", func(t *testing.T) {
		leaving := procs["serve-b"]
		mine := heldBy(w.holders(), leaving.id)
		stopped := time.Now()
		leaving.signal(t, syscall.SIGTERM)
		live = []string{"serve-a", "serve-d"}
		testwait.For(t, time.Minute, "the nine clusters held by serve-a and serve-d", spread(map[int]bool{4: true, 5: true}))
		for _, p := range mine {
			took := w.takenAt(p, stopped, live...).Sub(stopped)
			if took >= shareTiming.Duration {
				t.Errorf("%s taken over %s after its holder was stopped, want sooner than the lease duration %s: handed over, not expired", p, took, shareTiming.Duration)
			}
		}
		if err := leaving.wait(30 * time.Second); err != nil {
			t.Errorf("serve-b stopped with SIGTERM: %v", err)
		}
	})
	t.Run("the Lease of a cluster.yml removed from the repository is deleted", func(t *testing.T) {
		gone := paths[len(paths)-1]
		lease := replicas.ClusterLease(group, gone)
		if _, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{}); err != nil {
			t.Fatalf("the Lease of %s before its removal: %v", gone, err)
		}
		gitRun(t, work, "rm", "-q", gone) // its status.yml stays, and rigger may commit to it meanwhile
		gitRun(t, work, "commit", "-q", "-m", "remove "+gone)
		push(t, work)
		paths = paths[:len(paths)-1]
		// Given up by its holder at that fetch, deleted at a later fetch
		// of a replica: more pushes.
		fetched(t, work, 30*time.Second, "the Lease of "+gone+" deleted, and off every page", func() error {
			if _, err := client.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the Lease %s is still there (%v)", lease, err)
			}
			for _, id := range live {
				cs, err := boardOf(ports[id])
				if err != nil {
					return err
				}
				if slices.ContainsFunc(cs, func(c BoardCluster) bool { return c.Path == gone }) {
					return fmt.Errorf("%s's page still shows %s", id, gone)
				}
			}
			return nil
		})
		for _, p := range paths {
			if _, err := client.CoordinationV1().Leases(ns).Get(ctx, replicas.ClusterLease(group, p), metav1.GetOptions{}); err != nil {
				t.Errorf("the Lease of %s, still in the repository: %v", p, err)
			}
		}
	})
	for _, id := range live {
		procs[id].signal(t, syscall.SIGTERM)
	}
	for _, id := range live {
		if err := procs[id].wait(30 * time.Second); err != nil {
			t.Errorf("%s stopped with SIGTERM: %v", id, err)
		}
	}

	t.Run("a Lease changes holder only when given up or expired", func(t *testing.T) {
		w.mu.Lock()
		defer w.mu.Unlock()
		last := map[string]leaseSeen{} // by Lease
		changes := 0
		for _, s := range w.seen {
			prev, ok := last[s.name]
			if ok && prev.holder != "" && s.holder != "" && s.holder != prev.holder {
				// Taken from a holder that did not give it up: only once
				// its last renewal was a lease duration old, by the
				// Lease's own times (one clock: this machine's), less
				// up to a second: client-go compares the record with
				// its times in whole seconds, so the last renewal, in
				// the same second as the one before, may go unseen.
				changes++
				if quiet := s.acquire.Sub(prev.renew); quiet < shareTiming.Duration-time.Second {
					t.Errorf("%s: %s took it from %s %s after that one's last renewal, within the lease duration %s", s.path, s.holder, prev.holder, quiet, shareTiming.Duration)
					for _, x := range w.seen {
						if x.name == s.name && x.at.After(s.at.Add(-10*time.Second)) && !x.at.After(s.at) {
							t.Logf("  seen %s holder %q renew %s acquire %s", x.at.Format(time.StampMicro), x.holder, x.renew.Format(time.StampMicro), x.acquire.Format(time.StampMicro))
						}
					}
				}
			}
			last[s.name] = s
		}
		if changes == 0 {
			t.Error("no Lease was taken over from a holder that did not give it up: the killed replica's were")
		}
	})

	t.Run("no cluster is reconciled by two replicas at once", func(t *testing.T) {
		type span struct {
			id         string
			start, end time.Time
		}
		spans := map[string][]span{}
		for _, p := range procs {
			open := map[string]time.Time{}
			for _, r := range p.records(t) {
				if r.kind == EventReconcileStart {
					open[r.path] = r.at
					continue
				}
				spans[r.path] = append(spans[r.path], span{p.id, open[r.path], r.at})
				delete(open, r.path)
			}
			for path, start := range open { // cut short by SIGKILL
				spans[path] = append(spans[path], span{p.id, start, p.ended})
			}
		}
		n := 0
		for path, ss := range spans {
			slices.SortFunc(ss, func(a, b span) int { return a.start.Compare(b.start) })
			n += len(ss)
			for i := 1; i < len(ss); i++ {
				if ss[i].start.Before(ss[i-1].end) && ss[i].id != ss[i-1].id {
					t.Errorf("%s reconciled by %s from %s while %s did until %s", path, ss[i].id,
						ss[i].start.Format(time.StampMilli), ss[i-1].id, ss[i-1].end.Format(time.StampMilli))
				}
			}
		}
		if n < 30 {
			t.Errorf("%d reconciles recorded, want many more (a drift check every second)", n)
		}
	})
}

// push pushes work's branch, rebased on rigger's status commits that may
// have come first.
func push(t *testing.T, work string) {
	t.Helper()
	for try := 0; ; try++ {
		if _, err := gitTry(work, "push", "-q", "origin", "main"); err == nil {
			return
		} else if try == 5 {
			t.Fatal(err)
		}
		gitRun(t, work, "pull", "-q", "--rebase", "origin", "main")
	}
}

// fetched pushes commits that change no cluster.yml to work's origin, one
// a round (each makes every replica fetch), until cond holds after one,
// for at most timeout.
func fetched(t *testing.T, work string, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for n := 0; ; n++ {
		writeFile(t, filepath.Join(work, "README.md"), fmt.Sprintf("the clusters (%d)\n", time.Now().UnixNano()))
		gitRun(t, work, "add", "README.md")
		gitRun(t, work, "commit", "-q", "-m", "README")
		push(t, work)
		var err error
		if testwait.Until(3*time.Second, 100*time.Millisecond, func() bool { err = cond(); return err == nil }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %s and %d pushes; the last check: %v", what, timeout, n+1, err)
		}
	}
}

// boardOf is the board of the replica on port, as its /board serves it.
func boardOf(port int) ([]BoardCluster, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/board", port))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var cs []BoardCluster
	return cs, json.NewDecoder(resp.Body).Decode(&cs)
}

// heldBy are the paths held by id, sorted.
func heldBy(h map[string]string, id string) []string {
	var out []string
	for p, who := range h {
		if who == id {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// replicaProc is a replica process of TestShareReplicas.
type replicaProc struct {
	id, record, logFile string
	cmd                 *exec.Cmd
	done                chan struct{}
	err                 error
	ended               time.Time
}

func startReplica(t *testing.T, c replicaConfig) *replicaProc {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(c.Record), 0o700); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	p := &replicaProc{id: c.ID, record: c.Record, logFile: filepath.Join(filepath.Dir(c.Record), "log"), done: make(chan struct{})}
	out, err := os.Create(p.logFile)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestShareReplicaProcess$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), shareReplicaEnv+"="+string(raw))
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.ended = time.Now()
		out.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			if b, err := os.ReadFile(p.logFile); err == nil {
				t.Logf("%s's log ends:\n%s", p.id, tailLines(string(b), 40))
			}
		}
	})
	return p
}

func (p *replicaProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", p.id, err)
	}
	if sig == syscall.SIGKILL {
		if err := p.wait(10 * time.Second); err == nil {
			t.Fatalf("%s exited cleanly after SIGKILL", p.id)
		}
	}
}

// wait waits for the process to end and returns its error.
func (p *replicaProc) wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s still runs after %s", p.id, timeout)
	}
}

// reconcileRecord is a line of a replica's record file.
type reconcileRecord struct {
	kind    EventKind
	path    string
	at      time.Time
	trigger string
	// cancelled: a reconcile end whose reconcile was cut short.
	cancelled bool
}

func (p *replicaProc) records(t *testing.T) []reconcileRecord {
	t.Helper()
	f, err := os.Open(p.record)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []reconcileRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			continue // a line cut by SIGKILL
		}
		ns, err := strconv.ParseInt(fs[2], 10, 64)
		if err != nil {
			continue
		}
		r := reconcileRecord{kind: EventKind(fs[0]), path: fs[1], at: time.Unix(0, ns)}
		if len(fs) > 3 {
			r.trigger = fs[3]
		}
		if len(fs) > 4 {
			r.cancelled = fs[4] == "cancelled"
		}
		out = append(out, r)
	}
	return out
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func gitTry(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Human", "GIT_AUTHOR_EMAIL=human@example.test",
		"GIT_COMMITTER_NAME=Human", "GIT_COMMITTER_EMAIL=human@example.test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %v: %w\n%s", args, err, out)
	}
	return string(out), nil
}

func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitTry(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
