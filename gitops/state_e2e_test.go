package gitops

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// TestStateInSecrets runs two servers, as two replicas of serve with the
// state in Secrets of a real API server (RIGGER_E2E=1), one after the
// other on one cluster: what one's apply writes (the PKI, the nodes, the
// binding) is in the Secrets and in the other's working copy when it takes
// the cluster up, and what the other writes then is in the first's when it
// takes it up again.
func TestStateInSecrets(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	client, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "rigger-system"
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, _ := spec.Parse([]byte(validYML), "cluster.yml")
	set, _, err := pki.Ensure(nil, pki.RequestFor(c), time.Now())
	if err != nil {
		t.Fatal(err)
	}

	// replica is a server whose apply writes the PKI and nodes.json
	// (written, the value of nodes) into its working copy.
	replica := func(nodes *string) (*worker, string) {
		store := &secretstate.Store{Secrets: client.CoreV1().Secrets(ns), Namespace: ns}
		base := t.TempDir()
		srv := &Server{cfg: Config{
			StateDir: base, RepoURL: "https://git.example.com/ops.git", DriftInterval: time.Hour, ParseTimeout: time.Minute, Now: time.Now,
			LoadState: func(ctx context.Context, cluster, dir string) error {
				_, err := store.Load(ctx, cluster, dir)
				return err
			},
			Open: func(_ *spec.Cluster, opts reconcile.Options) (Session, error) {
				return &fakeSession{
					PlanFn: func() (*decide.Planned, error) { return planned(1), nil },
					ApplyFn: func(pl *decide.Planned) (*reconcile.Result, error) {
						if err := pki.Save(opts.StateDir, set); err != nil {
							return nil, err
						}
						if err := statedir.WriteJSON(opts.StateDir, "nodes.json", *nodes); err != nil {
							return nil, err
						}
						return &reconcile.Result{}, nil
					},
				}, nil
			},
		}, workers: map[string]*worker{}}
		w := &worker{srv: srv, path: "clusters/c/cluster.yml", log: slog.New(slog.DiscardHandler)}
		srv.workers[w.path] = w
		return w, filepath.Join(base, "c")
	}
	attempt := func(w *worker) {
		t.Helper()
		out := w.attempt(t.Context(), w.log, clusterRef{Path: w.path, Content: []byte(validYML), Size: int64(len(validYML))}, true)
		if out.err != nil || out.stalled != "" {
			t.Fatalf("reconcile: %v (stalled %q)", out.err, out.stalled)
		}
	}
	inSecrets := func() map[string][]byte {
		t.Helper()
		dir := t.TempDir()
		s := &secretstate.Store{Secrets: client.CoreV1().Secrets(ns), Namespace: ns}
		if _, err := s.Export(t.Context(), "c", dir, false); err != nil {
			t.Fatal(err)
		}
		files, err := secretstate.StateFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	same := func(what, dir string) {
		t.Helper()
		files, err := secretstate.StateFiles(dir)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(digests(inSecrets()), digests(files)); diff != "" {
			t.Fatalf("%s: the Secrets and the working copy differ (-Secrets +copy):\n%s", what, diff)
		}
	}

	nodesA, nodesB := "from a", "from b"
	a, dirA := replica(&nodesA)
	b, dirB := replica(&nodesB)
	attempt(a)
	same("after a's apply", dirA)
	got := inSecrets()
	for _, f := range []string{BindingFile, "nodes.json", pki.CACertName + ".pem", pki.CACertName + "-key.pem"} {
		if _, ok := got[f]; !ok {
			t.Errorf("%s is not in the Secrets after a's apply", f)
		}
	}

	attempt(b)
	same("after b took the cluster up and applied", dirB)
	if string(got[pki.CACertName+".pem"]) != string(inSecrets()[pki.CACertName+".pem"]) {
		t.Error("the CA changed when b took the cluster up")
	}

	nodesA = "from a again"
	attempt(a) // a's copy is stale: it is loaded again, and a's write goes through
	same("after a took the cluster up again", dirA)
	var nodes string
	if err := statedir.ReadJSON(dirA, "nodes.json", &nodes); err != nil || nodes != "from a again" {
		t.Errorf("nodes.json is %q (%v), want a's last write", nodes, err)
	}
}

// digests are the SHA-256 of files, so that a difference shows no key.
func digests(files map[string][]byte) map[string]string {
	out := map[string]string{}
	for f, b := range files {
		out[f] = fmt.Sprintf("%x (%d bytes)", sha256.Sum256(b), len(b))
	}
	return out
}

// TestSameNameOnTwoReplicas runs two servers, as two replicas of serve
// with the state in Secrets of a real API server (RIGGER_E2E=1), each
// holding one of two cluster.yml files with one cluster_name: neither sees
// the other's cluster.yml, so only the state can tell. Both read the
// Secrets before either binds them (a barrier), and race to bind: exactly
// one is reconciled, and the other is refused with a message that names
// both files and the Secret to delete, reconciles nothing, and stays
// refused; what the Secrets hold is the first one's only.
func TestSameNameOnTwoReplicas(t *testing.T) {
	api := apiservertest.Start(t, apiservertest.Options{})
	client, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		ns := fmt.Sprintf("rigger-system-%d", round)
		if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var loaded sync.WaitGroup // the barrier: both have read the Secrets
		loaded.Add(2)
		applied := map[string]int{}
		var mu sync.Mutex
		replica := func(path string) *worker {
			store := &secretstate.Store{Secrets: client.CoreV1().Secrets(ns), Namespace: ns}
			first := true
			srv := &Server{cfg: Config{
				StateDir: t.TempDir(), RepoURL: "https://git.example.com/ops.git", DriftInterval: time.Hour, ParseTimeout: time.Minute, Now: time.Now,
				LoadState: func(ctx context.Context, cluster, dir string) error {
					_, err := store.Load(ctx, cluster, dir)
					if first {
						first = false
						loaded.Done()
						loaded.Wait()
					}
					return err
				},
				StateFileAt: func(cluster, file string) string {
					return "the Secret " + ns + "/" + secretstate.SecretName(cluster, file)
				},
				Open: func(_ *spec.Cluster, opts reconcile.Options) (Session, error) {
					return &fakeSession{
						PlanFn: func() (*decide.Planned, error) { return planned(1), nil },
						ApplyFn: func(pl *decide.Planned) (*reconcile.Result, error) {
							mu.Lock()
							applied[path]++
							mu.Unlock()
							return &reconcile.Result{}, statedir.WriteJSON(opts.StateDir, "nodes.json", path)
						},
					}, nil
				},
			}, workers: map[string]*worker{}}
			w := &worker{srv: srv, path: path, log: slog.New(slog.DiscardHandler)}
			srv.workers[path] = w
			return w
		}
		paths := []string{"clusters/a/cluster.yml", "clusters/b/cluster.yml"}
		ws := []*worker{replica(paths[0]), replica(paths[1])}
		attempt := func(w *worker) outcome {
			return w.attempt(t.Context(), w.log, clusterRef{Path: w.path, Content: []byte(validYML), Size: int64(len(validYML))}, true)
		}
		outs := make([]outcome, 2)
		var g sync.WaitGroup
		for i, w := range ws {
			g.Go(func() { outs[i] = attempt(w) })
		}
		g.Wait()
		won := slices.IndexFunc(outs, func(o outcome) bool { return o.err == nil && o.stalled == "" })
		if won < 0 || outs[1-won].err == nil {
			t.Fatalf("round %d: outcomes %+v and %+v, want one reconciled and one refused", round, outs[0], outs[1])
		}
		winner, loser := paths[won], paths[1-won]
		check := func(o outcome) {
			t.Helper()
			msg := fmt.Sprint(o.err)
			if o.stalled != ReasonDuplicateCluster || !strings.Contains(msg, winner) || !strings.Contains(msg, loser) ||
				!strings.Contains(msg, secretstate.SecretName("c", BindingFile)) || !strings.Contains(msg, "another cluster_name") {
				t.Errorf("round %d: %s refused as %q: %s; want %s, naming both files, the binding's Secret and what to do",
					round, loser, o.stalled, msg, ReasonDuplicateCluster)
			}
		}
		check(outs[1-won])
		check(attempt(ws[1-won])) // and again, the binding now read at once
		if o := attempt(ws[won]); o.err != nil || o.stalled != "" {
			t.Errorf("round %d: %s, which bound the state, refused the second time: %v", round, winner, o.err)
		}
		mu.Lock()
		if applied[loser] != 0 || applied[winner] == 0 {
			t.Errorf("round %d: applies %v, want %s's only", round, applied, winner)
		}
		mu.Unlock()
		dir := t.TempDir()
		s := &secretstate.Store{Secrets: client.CoreV1().Secrets(ns), Namespace: ns}
		if _, err := s.Export(t.Context(), "c", dir, false); err != nil {
			t.Fatal(err)
		}
		var b Binding
		var nodes string
		if err := statedir.ReadJSON(dir, BindingFile, &b); err != nil || b.Path != winner {
			t.Errorf("round %d: the binding in the Secrets is %+v (%v), want %s", round, b, err, winner)
		}
		if err := statedir.ReadJSON(dir, "nodes.json", &nodes); err != nil || nodes != winner {
			t.Errorf("round %d: nodes.json in the Secrets is %q (%v), want %s's", round, nodes, err, winner)
		}
	}
}
