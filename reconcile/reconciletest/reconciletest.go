// Package reconciletest runs the reconcile engine against a real sandbox
// (package sandboxtest) in tests: the example cluster moved onto the
// sandbox's nodes, sessions with a state directory of the test's own, and
// plan and apply under the cluster's lock, failing the test with the plan
// and the progress lines when an apply fails.
package reconciletest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// allRoles are the roles of a node that runs everything.
var allRoles = []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}

// Roles gives the first n nodes of a sandbox every role, and the nodes
// of workers (by index) the worker role: the roles argument of Cluster.
func Roles(n int, workers ...int) map[int][]string {
	roles := map[int][]string{}
	for i := range n {
		roles[i] = slices.Clone(allRoles)
	}
	for _, w := range workers {
		roles[w] = []string{spec.RoleWorker}
	}
	return roles
}

// Cluster is the example sandbox cluster (sandboxtest.ClusterYML) on s
// with the nodes and roles given, loaded as `rigger apply` loads it, with
// a short SSH connect timeout (a partitioned node is given up quickly),
// then changed by each change.
func Cluster(t testing.TB, s *sandbox.Sandbox, roles map[int][]string, changes ...func(*spec.Cluster)) *spec.Cluster {
	t.Helper()
	return ClusterAt(t, s, roles, sandbox.KubernetesVersion, changes...)
}

// ClusterAt is Cluster running Kubernetes version k on the sandbox's
// images of it (sandbox.VersionImages: its hyperkube and etcd, in the
// system_images of the cluster.yml loaded, so that every service takes
// them), which sandbox.Options.KubernetesVersions must have built unless k
// is the default.
func ClusterAt(t testing.TB, s *sandbox.Sandbox, roles map[int][]string, k string, changes ...func(*spec.Cluster)) *spec.Cluster {
	t.Helper()
	images, err := sandbox.VersionImages(k)
	if err != nil {
		t.Fatal(err)
	}
	yml := sandboxtest.ClusterYML(t, s, roles)
	for old, new := range map[string]string{
		sandbox.HyperkubeRef(sandbox.KubernetesVersion): images["kubernetes"],
		sandbox.EtcdRef(sandbox.EtcdVersion):            images["etcd"],
	} {
		if !strings.Contains(yml, old) {
			t.Fatalf("the sandbox's cluster.yml names no %s:\n%s", old, yml)
		}
		yml = strings.ReplaceAll(yml, old, new)
	}
	c := Load(t, yml)
	c.Rigger.SSH.ConnectTimeout = spec.Duration(3 * time.Second)
	for _, change := range changes {
		change(c)
	}
	return c
}

// NetworkOnly turns off the add-ons but the network plugin
// (sandboxtest.NetworkOnly), for tests of the engine.
func NetworkOnly(c *spec.Cluster) {
	if c.DNS == nil {
		c.DNS = &spec.DNS{}
	}
	c.DNS.Provider, c.Monitoring.Provider = "none", "none"
}

// Load writes yml to a file and loads it.
func Load(t testing.TB, yml string) *spec.Cluster {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, diags, err := spec.Load(path)
	if err != nil {
		t.Fatalf("%v\n%v\n%s", err, diags, yml)
	}
	return c
}

// ExtraArg sets an extra_args flag of the service that service returns.
func ExtraArg(service func(*spec.Cluster) *map[string]string, flag, value string) func(*spec.Cluster) {
	return func(c *spec.Cluster) {
		m := service(c)
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[flag] = value
	}
}

// KubeAPIArgs and KubeletArgs are services for ExtraArg.
func KubeAPIArgs(c *spec.Cluster) *map[string]string   { return &c.Services.KubeAPI.ExtraArgs }
func KubeletArgs(c *spec.Cluster) *map[string]string   { return &c.Services.Kubelet.ExtraArgs }
func KubeProxyArgs(c *spec.Cluster) *map[string]string { return &c.Services.Kubeproxy.ExtraArgs }

// Applier plans and applies clusters with one state directory, as one
// `rigger apply` user would. Its methods take the (sub)test they run for.
type Applier struct {
	StateDir string
	// Options are those of every Apply; its Hooks are the Applier's own.
	Options reconcile.ApplyOptions
	// AllowRemovals is every session's (reconcile.Options.AllowRemovals).
	AllowRemovals bool
	// Now is the sessions' clock (nil: time.Now).
	Now func() time.Time
	// Open opens the sessions (nil: reconcile.Open): rigger serve's, for
	// one, reaches the agent nodes through its tunnel.
	Open func(*spec.Cluster, reconcile.Options) (*reconcile.Session, error)
	// Watch, when set, is called with each progress line of an apply as
	// it comes (a fault injected at a point of the apply).
	Watch func(node, msg string)

	mu sync.Mutex
	// events are the progress lines of the last apply; timed are those
	// and the lock taken and the apply done, with the time each came from
	// the start of its plan.
	events []string
	timed  []Event
}

// Event is a line of an apply's progress and when it came, from the start
// of its plan.
type Event struct {
	At   time.Duration
	Line string
}

// New is an Applier with a state directory of the test's.
func New(t testing.TB) *Applier {
	return &Applier{StateDir: filepath.Join(t.TempDir(), "state")}
}

// Session opens a session on c, closed when the test ends; what it logs,
// debug lines included (the time each part of a plan took), goes to the
// test's log. set, when given, changes the session's options.
func (a *Applier) Session(t testing.TB, c *spec.Cluster, set ...func(*reconcile.Options)) *reconcile.Session {
	t.Helper()
	open := a.Open
	if open == nil {
		open = reconcile.Open
	}
	opts := reconcile.Options{StateDir: a.StateDir, Now: a.Now, Log: testLogger(t), AllowRemovals: a.AllowRemovals}
	for _, f := range set {
		f(&opts)
	}
	sess, err := open(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// Lock takes the cluster's lock of sess, released by the caller or when
// the test ends.
func (a *Applier) Lock(ctx context.Context, t testing.TB, sess *reconcile.Session) *reconcile.Lock {
	t.Helper()
	lk, err := sess.Lock(ctx, "apply", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lk.Release)
	return lk
}

// Plan plans c.
func (a *Applier) Plan(ctx context.Context, t testing.TB, c *spec.Cluster) *decide.Planned {
	t.Helper()
	pl, err := a.Session(t, c).Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// Apply plans and applies c under the cluster's lock, fails the test when
// that fails, and returns the plan it applied.
func (a *Applier) Apply(ctx context.Context, t testing.TB, c *spec.Cluster) *decide.Planned {
	t.Helper()
	pl, res, err := a.TryApply(ctx, t, c)
	if err != nil {
		var b strings.Builder
		pl.Plan.Render(&b)
		t.Fatalf("apply: %v\nplan:\n%s\nnot run: %d (the progress lines are above)", err, b.String(), len(res.NotRun))
	}
	return pl
}

// timedEvents are the progress lines of the last apply, each with the
// time it came from the start of the plan, for the test's log: where a
// slow test spends its time.
func (a *Applier) timedEvents() string {
	var b strings.Builder
	for _, e := range a.Timed() {
		fmt.Fprintf(&b, "%6.1fs %s\n", e.At.Seconds(), e.Line)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Timed are the progress lines of the last apply, each with the time it
// came, with "(lock taken)" and "(apply done)".
func (a *Applier) Timed() []Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.timed)
}

// TryApply plans and applies c under the cluster's lock and returns what
// happened; only a failed plan fails the test.
func (a *Applier) TryApply(ctx context.Context, t testing.TB, c *spec.Cluster) (*decide.Planned, *reconcile.Result, error) {
	t.Helper()
	start := time.Now()
	sess := a.Session(t, c)
	pl, err := sess.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.applyPlanned(ctx, t, sess, pl, start)
	return pl, res, err
}

// ApplyPlanned applies pl with sess under the cluster's lock, recording
// the progress lines, and returns what Apply did.
func (a *Applier) ApplyPlanned(ctx context.Context, t testing.TB, sess *reconcile.Session, pl *decide.Planned) (*reconcile.Result, error) {
	t.Helper()
	return a.applyPlanned(ctx, t, sess, pl, time.Now())
}

func (a *Applier) applyPlanned(ctx context.Context, t testing.TB, sess *reconcile.Session, pl *decide.Planned, start time.Time) (*reconcile.Result, error) {
	t.Helper()
	a.mu.Lock()
	a.events, a.timed = nil, nil
	a.mu.Unlock()
	lk := a.Lock(ctx, t, sess)
	defer lk.Release()
	a.step("(lock taken)", time.Since(start), false)
	o := a.Options
	o.Hooks = plan.Hooks{Step: func(node, msg string, err error) {
		line := node + ": " + msg
		if err != nil {
			line += ": " + err.Error()
		}
		a.step(line, time.Since(start), true)
		if a.Watch != nil {
			a.Watch(node, msg)
		}
	}}
	res, err := sess.Apply(ctx, lk, pl, o)
	a.step("(apply done)", time.Since(start), false)
	t.Logf("apply:\n%s", a.timedEvents())
	return res, err
}

// step records a line of timedEvents, and of Events if event.
func (a *Applier) step(line string, at time.Duration, event bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if event {
		a.events = append(a.events, line)
	}
	a.timed = append(a.timed, Event{At: at, Line: line})
}

// Events are the progress lines of the last apply, "node: message[: error]".
func (a *Applier) Events() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}

// InSync checks that a plan of c changes nothing, on the nodes or on the
// Nodes.
func (a *Applier) InSync(ctx context.Context, t testing.TB, c *spec.Cluster) {
	t.Helper()
	if pl := a.Plan(ctx, t, c); pl.Changes() {
		t.Errorf("not in sync: steps %v, Node changes %+v", StepLines(pl.Plan), pl.NodeChanges)
	}
}

// Etcd is the value of c's snapshot operations (save, list, delete; not
// restore, which needs the lock: EtcdLocked).
func (a *Applier) Etcd(ctx context.Context, t testing.TB, c *spec.Cluster) *etcdsnap.Cluster {
	t.Helper()
	ec, err := a.Session(t, c).Etcd(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ec
}

// EtcdLocked is the value of c's snapshot operations under the cluster's
// lock, restore included; release gives the lock up (or the end of the
// test).
func (a *Applier) EtcdLocked(ctx context.Context, t testing.TB, c *spec.Cluster) (ec *etcdsnap.Cluster, release func()) {
	t.Helper()
	sess := a.Session(t, c)
	lk := a.Lock(ctx, t, sess)
	ec, err := sess.Etcd(ctx, lk)
	if err != nil {
		t.Fatal(err)
	}
	return ec, lk.Release
}

// Client is client-go through c's admin kubeconfig.
func (a *Applier) Client(ctx context.Context, t testing.TB, c *spec.Cluster) kubernetes.Interface {
	t.Helper()
	cs, err := adminClient(ctx, a.Session(t, c), c)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// RESTConfig is the client configuration of c's admin kubeconfig.
func (a *Applier) RESTConfig(ctx context.Context, t testing.TB, c *spec.Cluster) *rest.Config {
	t.Helper()
	cfg, err := adminConfig(ctx, a.Session(t, c), c)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// adminClient is client-go through sess's admin kubeconfig.
func adminClient(ctx context.Context, sess *reconcile.Session, c *spec.Cluster) (kubernetes.Interface, error) {
	cfg, err := adminConfig(ctx, sess, c)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// adminConfig is the client configuration of sess's admin kubeconfig.
func adminConfig(ctx context.Context, sess *reconcile.Session, c *spec.Cluster) (*rest.Config, error) {
	set, err := sess.PKI(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	kc, err := pki.AdminKubeconfig(set, pki.RequestFor(c))
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	return clientcmd.RESTConfigFromKubeConfig(kc)
}

// Eventually checks cond until it holds; if timeout passes first, it fails
// the test with what, the time waited and cond's last error. An error
// means not yet, not failure: the check goes on. A slow machine only
// makes it wait longer (testwait.ForContext says how often it checks).
func Eventually(ctx context.Context, t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	testwait.ForContext(ctx, t, timeout, what, func(ctx context.Context) error {
		ok, err := cond(ctx)
		switch {
		case ok:
			return nil
		case err == nil:
			return errors.New("not so yet, and no error")
		}
		return err
	})
}

// NodesReady waits until the Nodes of nodes (by hostname) are Ready, as
// cs lists them.
func NodesReady(ctx context.Context, t testing.TB, cs kubernetes.Interface, nodes []sandbox.Node) {
	t.Helper()
	Eventually(ctx, t, 3*time.Minute, "every Node Ready", func(ctx context.Context) (bool, error) {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready[n.Name] = true
				}
			}
		}
		var missing []string
		for _, n := range nodes {
			if !ready[n.Hostname] {
				missing = append(missing, n.Hostname)
			}
		}
		if len(missing) > 0 {
			return false, errors.New("not Ready: " + strings.Join(missing, ", "))
		}
		return true, nil
	})
}

// StepLines are a plan's steps as "node action component".
func StepLines(p *plan.Plan) []string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, s.Node+" "+string(s.Action)+" "+s.Component)
	}
	return out
}

// testLogger logs to t's log until t ends (what a goroutine logs later is
// dropped: testing panics on it).
func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// sandboxTeardown is the time a sandbox test leaves, before the test
// binary's deadline, for its cleanup (nodes stopped, namespaces removed).
const sandboxTeardown = 2 * time.Minute

// UntilTestDeadline is the context of a sandbox test: it ends before the
// test binary's -timeout does, with sandboxTeardown to spare, rather than
// after a fixed budget, so that a slow machine makes the test slower, not
// failed.
func UntilTestDeadline(t *testing.T) (context.Context, context.CancelFunc) {
	if dl, ok := t.Deadline(); ok {
		return context.WithDeadline(t.Context(), dl.Add(-sandboxTeardown))
	}
	return context.WithCancel(t.Context())
}

// EtcdGet is the raw value of key in etcd, read with etcdctl in the node's
// etcd container (Etcdctl).
func EtcdGet(ctx context.Context, t *testing.T, cli *client.Client, key string) []byte {
	t.Helper()
	out := Etcdctl(ctx, t, cli, "get", key, "--print-value-only")
	if len(out) == 0 {
		t.Fatalf("etcdctl get %s: no such key", key)
	}
	return out
}

// Etcdctl runs etcdctl with args in the node's etcd container (its
// environment points etcdctl at the member) and returns what it printed.
func Etcdctl(ctx context.Context, t *testing.T, cli *client.Client, args ...string) []byte {
	t.Helper()
	ex, err := cli.ContainerExecCreate(ctx, "etcd", container.ExecOptions{
		Cmd: append([]string{"etcdctl"}, args...), AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	att, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var out, errOut bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &errOut, att.Reader); err != nil {
		t.Fatal(err)
	}
	if insp, err := cli.ContainerExecInspect(ctx, ex.ID); err != nil || insp.ExitCode != 0 {
		t.Fatalf("etcdctl %s: exit %d, %v: %s", strings.Join(args, " "), insp.ExitCode, err, errOut.String())
	}
	return out.Bytes()
}
