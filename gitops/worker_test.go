package gitops

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/lock"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// fakeSession is a Session whose methods do what their XxxFn says, or,
// when it is nil, what a cluster in sync answers.
type fakeSession struct {
	LockFn              func() (*reconcile.Lock, error)
	PlanFn              func() (*decide.Planned, error)
	ApplyFn             func(pl *decide.Planned) (*reconcile.Result, error)
	ScheduledSnapshotFn func() (*etcdsnap.ScheduledResult, error)

	applied, closed int
}

var _ Session = (*fakeSession)(nil)

func (f *fakeSession) Lock(context.Context, string, bool) (*reconcile.Lock, error) {
	if f.LockFn != nil {
		return f.LockFn()
	}
	return &reconcile.Lock{}, nil
}

func (f *fakeSession) RestoreRequest() (*etcdsnap.RestoreRequest, error) { return nil, nil }

func (f *fakeSession) RestorePending(context.Context, *reconcile.Lock, etcdsnap.RestoreOptions) (*etcdsnap.RestoreResult, error) {
	return nil, nil
}

// Plan is PlanFn's plan; once applied, what the nodes look like after an
// apply: in sync.
func (f *fakeSession) Plan(context.Context) (*decide.Planned, error) {
	if f.PlanFn != nil && f.applied == 0 {
		return f.PlanFn()
	}
	return planned(0), nil
}

func (f *fakeSession) Apply(_ context.Context, _ *reconcile.Lock, pl *decide.Planned, _ reconcile.ApplyOptions) (*reconcile.Result, error) {
	f.applied++
	if f.ApplyFn != nil {
		return f.ApplyFn(pl)
	}
	res := &reconcile.Result{}
	for _, s := range pl.Plan.Steps {
		res.Done = append(res.Done, execute.Outcome{Step: s})
	}
	return res, nil
}

func (f *fakeSession) ScheduledSnapshot(context.Context, *reconcile.Lock) (*etcdsnap.ScheduledResult, error) {
	if f.ScheduledSnapshotFn != nil {
		return f.ScheduledSnapshotFn()
	}
	return &etcdsnap.ScheduledResult{}, nil
}

func (f *fakeSession) Close() error { f.closed++; return nil }

// planned is a plan of one node with steps kubelet restarts to make and
// the nodes of unreachable not looked at.
func planned(steps int, unreachable ...string) *decide.Planned {
	p := &plan.Plan{}
	for range steps {
		p.Steps = append(p.Steps, plan.Step{Node: "10.0.0.1", Component: desired.Kubelet, Action: plan.Restart, Phase: plan.PhaseWorker, Reason: "container exited"})
	}
	for _, u := range unreachable {
		p.Unreachable = append(p.Unreachable, plan.Unreachable{Node: u, Error: "connection refused"})
	}
	o := &observe.Cluster{Nodes: map[string]*observe.Node{"10.0.0.1": {Address: "10.0.0.1", Reachable: true}}}
	d := &desired.Cluster{Name: "c", Nodes: []desired.Node{{Address: "10.0.0.1"}}}
	for _, u := range unreachable {
		o.Nodes[u] = &observe.Node{Address: u}
		d.Nodes = append(d.Nodes, desired.Node{Address: u})
	}
	return &decide.Planned{Plan: p, Desired: d, Observed: o}
}

const validYML = "cluster_name: c\nnodes:\n  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n"

// TestAttempt runs one reconcile of the worker against a fake session and
// checks what it decides: stall or retry and when, the conditions, whether
// it applied, and the drift it recorded.
func TestAttempt(t *testing.T) {
	stalled := func(r stall.Reason, err error) error { return &stall.Error{Reason: r, Stalls: true, Err: err} }
	retried := func(r stall.Reason, err error) error { return &stall.Error{Reason: r, Err: err} }
	type want struct {
		ready, readyReason string
		stalled            bool
		retry              bool
		retryIn            time.Duration
		applied            int
		drift              int
	}
	tests := []struct {
		name    string
		yml     string
		size    int64 // of a file not read (Content nil)
		changed bool
		session *fakeSession
		openErr error
		// loadErr is Config.LoadState's error, when set.
		loadErr error
		// parseTimeout is ParseTimeout, a minute when zero.
		parseTimeout time.Duration
		want         want
		wantMsg      string // in the error
	}{
		{
			name: "in sync: nothing applied", session: &fakeSession{},
			want: want{ready: "True", readyReason: ReasonSucceeded},
		},
		{
			name: "a change applied", changed: true,
			session: &fakeSession{PlanFn: func() (*decide.Planned, error) { return planned(2), nil }},
			want:    want{ready: "True", readyReason: ReasonSucceeded, applied: 1},
		},
		{
			name:    "drift repaired and recorded (cluster.yml unchanged)",
			session: &fakeSession{PlanFn: func() (*decide.Planned, error) { return planned(1), nil }},
			want:    want{ready: "True", readyReason: ReasonSucceeded, applied: 1, drift: 1},
		},
		{
			name: "suspended: observed, not changed", yml: validYML + "rigger:\n  suspend: true\n", changed: true,
			session: &fakeSession{PlanFn: func() (*decide.Planned, error) { return planned(3), nil }},
			want:    want{ready: "Unknown", readyReason: ReasonSuspended},
		},
		{
			name: "invalid cluster.yml stalls", yml: "cluster_name: c\nnodez: []\n", session: &fakeSession{},
			want: want{ready: "False", readyReason: string(stall.InvalidSpec), stalled: true},
		},
		{
			name: "a cluster.yml that holds an alias of itself stalls", session: &fakeSession{},
			yml:     validYML + "services:\n  kube-api:\n    admission_configuration: &a {apiVersion: v1, kind: X, x: *a}\n",
			want:    want{ready: "False", readyReason: string(stall.InvalidSpec), stalled: true},
			wantMsg: "clusters/c/cluster.yml:6:62: error: services.kube-api.admission_configuration.x: the alias *a is inside the value it names",
		},
		{
			name: "a cluster.yml too large to read stalls", session: &fakeSession{}, yml: "-", size: 9 << 20,
			want:    want{ready: "False", readyReason: string(stall.InvalidSpec), stalled: true},
			wantMsg: "clusters/c/cluster.yml: error: the file is larger than 8 MiB (9437184 bytes)",
		},
		{
			name: "a cluster.yml not read within ParseTimeout stalls", session: &fakeSession{}, parseTimeout: -1,
			want:    want{ready: "False", readyReason: string(stall.InvalidSpec), stalled: true},
			wantMsg: "clusters/c/cluster.yml: error: the file was not read within -1ns",
		},
		{
			name: "a damaged state file stalls", session: &fakeSession{},
			openErr: stalled(stall.StateDamaged, &statedir.DamagedError{Path: "/state/nodes.json", Err: errors.New("unexpected EOF")}),
			want:    want{ready: "False", readyReason: string(stall.StateDamaged), stalled: true},
		},
		{
			name: "an unreadable state directory is retried", session: &fakeSession{},
			openErr: retried(stall.Failed, fs.ErrPermission),
			want:    want{ready: "False", readyReason: string(stall.Failed), retry: true},
		},
		{
			name: "a damaged state Secret stalls", session: &fakeSession{},
			loadErr: stalled(stall.StateDamaged, &statedir.DamagedError{Path: "Secret rigger-system/rigger-state-c-nodes-json-0a1b2c3d4e", Err: errors.New("no content")}),
			want:    want{ready: "False", readyReason: string(stall.StateDamaged), stalled: true},
			wantMsg: "Secret rigger-system/rigger-state-c-nodes-json-0a1b2c3d4e is damaged",
		},
		{
			name: "state Secrets not read are retried", session: &fakeSession{},
			loadErr: errors.New("list the state Secrets of cluster c in namespace rigger-system: connection refused"),
			want:    want{ready: "False", readyReason: string(stall.Failed), retry: true},
		},
		{
			name: "the lock held by another rigger: later, not with backoff",
			session: &fakeSession{LockFn: func() (*reconcile.Lock, error) {
				return nil, retried(stall.LockHeld, &lock.HeldError{Holder: lock.Holder{ID: "rigger apply on laptop (pid 7)"}, Lock: "/state/lock"})
			}},
			want: want{ready: "False", readyReason: string(stall.LockHeld), retry: true, retryIn: lockHeldRetry},
		},
		{
			name:    "a failed plan is retried with backoff",
			session: &fakeSession{PlanFn: func() (*decide.Planned, error) { return nil, errors.New("observe: context deadline exceeded") }},
			want:    want{ready: "False", readyReason: string(stall.Failed), retry: true},
		},
		{
			name: "the removal guard stalls", changed: true,
			session: &fakeSession{
				PlanFn: func() (*decide.Planned, error) { return planned(1), nil },
				ApplyFn: func(*decide.Planned) (*reconcile.Result, error) {
					return &reconcile.Result{}, stalled(stall.RemovalGuard, &plan.RemovalGuardError{Removed: []string{"a", "b"}, Total: 3, Limit: "30%"})
				},
			},
			want: want{ready: "False", readyReason: string(stall.RemovalGuard), stalled: true, applied: 1},
		},
		{
			name: "a failed step is retried", changed: true,
			session: &fakeSession{
				PlanFn: func() (*decide.Planned, error) { return planned(1), nil },
				ApplyFn: func(pl *decide.Planned) (*reconcile.Result, error) {
					err := errors.New("kubelet not healthy")
					return &reconcile.Result{Result: execute.Result{Done: []execute.Outcome{{Step: pl.Plan.Steps[0], Err: err}}}}, err
				},
			},
			want: want{ready: "False", readyReason: string(stall.Failed), retry: true, applied: 1},
		},
		{
			name:    "an unreachable node: the rest converges, retried",
			session: &fakeSession{PlanFn: func() (*decide.Planned, error) { return planned(0, "10.0.0.2"), nil }},
			want:    want{ready: "False", readyReason: ReasonNodesUnreachable, retry: true},
		},
		{
			name: "a failed snapshot does not fail the reconcile",
			session: &fakeSession{ScheduledSnapshotFn: func() (*etcdsnap.ScheduledResult, error) {
				return &etcdsnap.ScheduledResult{Schedule: etcdsnap.Schedule{Enabled: true, Due: true}}, errors.New("no etcd member is healthy")
			}},
			want: want{ready: "True", readyReason: ReasonSucceeded},
		},
	}
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.parseTimeout == 0 {
				tt.parseTimeout = time.Minute
			}
			srv := &Server{cfg: Config{
				StateDir: t.TempDir(), DriftInterval: time.Hour, Now: func() time.Time { return now },
				ParseTimeout: tt.parseTimeout,
				Open: func(*spec.Cluster, reconcile.Options) (Session, error) {
					if tt.openErr != nil {
						return nil, tt.openErr
					}
					return tt.session, nil
				},
			}, workers: map[string]*worker{}}
			if tt.loadErr != nil {
				srv.cfg.LoadState = func(context.Context, string, string) error { return tt.loadErr }
			}
			w := &worker{srv: srv, path: "clusters/c/cluster.yml", log: slog.New(slog.DiscardHandler)}
			srv.workers[w.path] = w
			yml := tt.yml
			if yml == "" {
				yml = validYML
			}
			ref := clusterRef{Path: w.path, Content: []byte(yml), Size: int64(len(yml))}
			if tt.size > 0 {
				ref.Content, ref.Size = nil, tt.size
			}
			out := w.attempt(t.Context(), w.log, ref, tt.changed)
			if out.err == nil && tt.wantMsg != "" || out.err != nil && !strings.Contains(out.err.Error(), tt.wantMsg) {
				t.Errorf("error %v, want one that says %q", out.err, tt.wantMsg)
			}

			got := want{stalled: out.stalled != "", retry: out.retry, retryIn: out.retryIn, applied: tt.session.applied, drift: len(w.drift)}
			for _, c := range conditions(out, "abc", nil, now) {
				if c.Type == ConditionReady {
					got.ready, got.readyReason = c.Status, c.Reason
				}
				if c.Type == ConditionStalled && (c.Status == conditionTrue) != got.stalled {
					t.Errorf("Stalled condition %+v, outcome stalled %q", c, out.stalled)
				}
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s\nerror: %v", diff, out.err)
			}
			if tt.openErr == nil && tt.loadErr == nil && tt.yml == "" && tt.parseTimeout > 0 && tt.session.closed != 1 {
				t.Errorf("session closed %d times, want once", tt.session.closed)
			}
		})
	}
}

// TestLoadStateBeforeBinding: with LoadState, a cluster's state is loaded
// into its state directory before its binding is read, so that the
// binding of the loaded state (another cluster.yml's, here) is the one
// checked; and the directory loaded is the cluster's.
func TestLoadStateBeforeBinding(t *testing.T) {
	base := t.TempDir()
	var loaded []string
	srv := &Server{cfg: Config{
		StateDir: base, DriftInterval: time.Hour, ParseTimeout: time.Minute, Now: time.Now, RepoURL: "https://git.example.com/ops.git",
		Open: func(*spec.Cluster, reconcile.Options) (Session, error) { return &fakeSession{}, nil },
		LoadState: func(_ context.Context, cluster, dir string) error {
			loaded = append(loaded, cluster+" "+dir)
			return statedir.WriteJSON(dir, BindingFile, Binding{Repository: "https://git.example.com/ops.git", Path: "clusters/other/cluster.yml"})
		},
	}, workers: map[string]*worker{}}
	w := &worker{srv: srv, path: "clusters/c/cluster.yml", log: slog.New(slog.DiscardHandler)}
	srv.workers[w.path] = w
	out := w.attempt(t.Context(), w.log, clusterRef{Path: w.path, Content: []byte(validYML), Size: int64(len(validYML))}, true)
	if out.stalled != ReasonDuplicateCluster || out.err == nil || !strings.Contains(out.err.Error(), "clusters/other/cluster.yml") {
		t.Errorf("got stalled %q, %v; want the loaded binding of clusters/other/cluster.yml refused", out.stalled, out.err)
	}
	if want := []string{"c " + filepath.Join(base, "c")}; !slices.Equal(loaded, want) {
		t.Errorf("LoadState called with %q, want %q", loaded, want)
	}
}

// TestRetryDelay: backoff doubles from retryMin, is capped by the drift
// interval, and an outcome's own delay wins.
func TestRetryDelay(t *testing.T) {
	tests := []struct {
		name     string
		out      outcome
		failures int
		drift    time.Duration
		want     time.Duration
	}{
		{"first failure", outcome{retry: true}, 1, time.Hour, retryMin},
		{"third failure", outcome{retry: true}, 3, time.Hour, 4 * retryMin},
		{"capped by the drift interval", outcome{retry: true}, 20, 5 * time.Minute, 5 * time.Minute},
		{"a held lock", outcome{retry: true, retryIn: lockHeldRetry}, 9, time.Hour, lockHeldRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryDelay(tt.out, tt.failures, tt.drift); got != tt.want {
				t.Errorf("retryDelay = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestAddonDriftRepaired: a drift check whose plan finds an add-on object
// changed by hand applies it again and records the repair, as for a
// container.
func TestAddonDriftRepaired(t *testing.T) {
	cs := &addons.ChangeSet{Addons: []addons.AddonChanges{{Name: "rke-coredns-addon", Changes: []addons.Change{
		{Object: addons.ObjectRef{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "kube-system", Name: "coredns"}, Action: addons.Configure, Summary: "spec.replicas changed"},
	}}}}
	sess := &fakeSession{
		PlanFn: func() (*decide.Planned, error) {
			pl := planned(0)
			pl.Addons = cs
			return pl, nil
		},
		ApplyFn: func(pl *decide.Planned) (*reconcile.Result, error) { return &reconcile.Result{Addons: pl.Addons}, nil },
	}
	srv := &Server{cfg: Config{StateDir: t.TempDir(), DriftInterval: time.Hour, ParseTimeout: time.Minute, Now: time.Now,
		Open: func(*spec.Cluster, reconcile.Options) (Session, error) { return sess, nil }}, workers: map[string]*worker{}}
	w := &worker{srv: srv, path: "clusters/c/cluster.yml", log: slog.New(slog.DiscardHandler)}
	srv.workers[w.path] = w
	w.attempt(t.Context(), w.log, clusterRef{Path: w.path, Content: []byte(validYML)}, false)
	if sess.applied != 1 || len(w.drift) != 1 {
		t.Fatalf("applied %d times, drift %+v: want one apply and one repair recorded", sess.applied, w.drift)
	}
	if d := w.drift[0]; d.Component != "addon/rke-coredns-addon" || d.Action != string(addons.Configure) || !strings.Contains(d.Reason, "kube-system/coredns") {
		t.Errorf("drift recorded %+v, want the add-on, configure, and the object", d)
	}
}

// TestSnapshotStatusNotInS3: status.yml names the snapshots S3 lacks while
// the schedule reports them (S3 down when one was taken), and, once a run
// uploaded them, says so and names none.
func TestSnapshotStatusNotInS3(t *testing.T) {
	now := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	const s1 = "2026-11-24T01:00:00Z_etcd"
	sc := &etcdsnap.Sidecar{Name: s1, Kind: etcdsnap.KindScheduled, TakenAt: now, Size: 10, SHA256: strings.Repeat("a", 64)}
	runs := []*etcdsnap.ScheduledResult{
		{Schedule: etcdsnap.Schedule{Enabled: true, Due: true}, Next: now.Add(time.Hour),
			Snapshot: &etcdsnap.SaveResult{Sidecar: sc},
			ListErr:  errors.New("s3 list s3://b/: connection refused"),
			S3Err:    &etcdsnap.UploadError{Name: s1, Err: errors.New("connection refused")},
			NotInS3:  []string{s1}},
		{Schedule: etcdsnap.Schedule{Enabled: true, Next: now.Add(time.Hour)}, Next: now.Add(time.Hour), Uploaded: []string{s1}},
	}
	sess := &fakeSession{}
	srv := &Server{cfg: Config{Now: func() time.Time { return now }}}
	w := &worker{srv: srv, log: slog.New(slog.DiscardHandler)}
	c := &spec.Cluster{ClusterName: "c"}
	var got []*SnapshotStatus
	for _, r := range runs {
		sess.ScheduledSnapshotFn = func() (*etcdsnap.ScheduledResult, error) { return r, nil }
		w.snapshot(t.Context(), w.log, sess, nil, c)
		b, err := w.statusFile(outcome{cluster: "c"}, "snapshot", now, now).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		f := ParseStatus(b)
		if f == nil || f.Snapshots == nil {
			t.Fatalf("status.yml without snapshots:\n%s", b)
		}
		got = append(got, f.Snapshots)
	}
	if down := got[0]; !slices.Equal(down.NotInS3, []string{s1}) || !strings.Contains(down.Error, "upload snapshot "+s1+" to s3") {
		t.Errorf("status.yml with S3 down: %+v; want %s not in s3, and the upload's error", down, s1)
	}
	if back := got[1]; back.NotInS3 != nil || back.Error != "" || !slices.Equal(back.Uploaded, []string{s1}) {
		t.Errorf("status.yml once %s was uploaded: %+v; want it uploaded, nothing missing, no error", s1, back)
	}
}

// TestDriftChecksSpread gives 100 clusters whose reconciles ended at the
// same moment (a server that started them together) and checks that their
// next drift checks spread over the interval instead of bunching: no tenth
// of the interval holds more than a quarter of them; each comes between
// half an interval and one and a half after the last run; a cluster's
// checks after that are one interval apart, and a server restarted later
// picks the same phase.
func TestDriftChecksSpread(t *testing.T) {
	const clusters = 100
	interval := 15 * time.Second
	end := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	srv := &Server{cfg: Config{DriftInterval: interval}}
	var buckets [10]int
	for i := range clusters {
		w := &worker{srv: srv, path: fmt.Sprintf("clusters/c%03d/cluster.yml", i), lastRun: end}
		due := w.driftDue()
		if gap := due.Sub(end); gap < interval/2 || gap >= interval*3/2 {
			t.Fatalf("%s: next drift check %s after the last run, want within [%s, %s)", w.path, gap, interval/2, interval*3/2)
		}
		buckets[int(due.Sub(end)%interval*10/interval)]++
		w.lastRun = due.Add(200 * time.Millisecond) // the check took 200 ms
		if next := w.driftDue(); next.Sub(due) != interval {
			t.Errorf("%s: checks at %s then %s, want %s apart", w.path, due, next, interval)
		}
		later := &worker{srv: srv, path: w.path, lastRun: end.Add(7 * time.Hour)}
		if got := later.driftDue().Sub(due) % interval; got != 0 {
			t.Errorf("%s: a later server's checks are %s off this one's phase", w.path, got)
		}
	}
	for i, n := range buckets {
		if n > clusters/4 {
			t.Errorf("%d of %d drift checks fall in tenth %d of the interval (per tenth: %v)", n, clusters, i, buckets)
		}
	}
	if (&worker{srv: srv, path: "c/cluster.yml"}).driftDue() != (time.Time{}) {
		t.Error("a worker that never ran is not due at once")
	}
}
