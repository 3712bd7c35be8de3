package gitops_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/minio/minio-go/v7"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/etcdsnap/s3test"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// chaosEnv turns the chaos suite on ("1"), with RIGGER_E2E=1: `make chaos`.
const chaosEnv = "RIGGER_CHAOS"

// chaosSubnet is the chaos suite's sandbox (sandboxtest's table).
const chaosSubnet = 22

// TestChaosSandbox is the chaos suite (docs/reliability.md): on one
// 3-node sandbox, every node etcd, control plane and worker, it kills
// `rigger apply` with RIGGER_FAULT at every phase boundary and in the
// middle of phases (a cold converge, an etcd rolling change, an etcd
// member added, a control-plane rolling change), stops a node's Docker
// engine during an apply, partitions a node during an etcd member's
// replacement, kills `rigger serve` between a reconcile and its status
// commit, and takes the git repository and the S3 server away while serve
// needs them. After each fault it checks that the cluster converges again
// (a plan then changes nothing), that a ConfigMap written before is still
// there, and that etcd has each node's member once; it prints a table of
// the figures at the end.
//
// A kill chain applies with RIGGER_FAULT set to the points not passed
// yet: each apply is killed at the first of them it reaches, and the next
// starts from what it left. Every kill is followed by an apply that must
// go on from there (not be refused: the lock and Lease of a dead apply
// are free at once), and the last apply, without a fault, must converge.
func TestChaosSandbox(t *testing.T) {
	if os.Getenv(chaosEnv) != "1" {
		t.Skipf("the chaos suite: make chaos (%s=1 and %s=1, as root)", chaosEnv, sandboxtest.EnvVar)
	}
	sb := sandboxtest.Start(t, sandbox.Options{Subnet: chaosSubnet, Nodes: 3, Images: true})
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Minute)
	defer cancel()
	c := &chaos{sb: sb, bin: sandboxtest.BuildRigger(t), a: rt.New(t), dir: t.TempDir()}
	c.serveState = filepath.Dir(c.a.StateDir)
	c.a.StateDir = filepath.Join(c.serveState, "sandbox") // serve's state directory of the cluster "sandbox"
	defer func() { fmt.Print(c.table()) }()
	// serve's repository, with the cluster as it starts; serve's scenarios
	// push their changes to it.
	c.port = freePort(t)
	c.origin = newOrigin(t, c.port)
	c.origin.commit(t, "add the sandbox cluster", map[string]string{clusterPath: c.yml(t, knobs{}), "README.md": "clusters\n"})
	c.origin.push(t)

	if !t.Run("cold converge, killed at every phase", func(t *testing.T) {
		c.killChain(ctx, t, "kill -9 of apply: cold converge", knobs{}, false,
			crashpoint.ApplyLocked,
			crashpoint.PhaseStart("files"), crashpoint.Step("files")+"#2", crashpoint.PhaseDone("files"),
			crashpoint.PhaseStart("etcd"), crashpoint.Step("etcd")+"#1", crashpoint.PhaseDone("etcd"),
			crashpoint.PhaseStart("controlplane"), crashpoint.Step("controlplane")+"#2", crashpoint.PhaseDone("controlplane"),
			crashpoint.PhaseStart("kubernetes"), crashpoint.PhaseDone("kubernetes"),
			crashpoint.PhaseStart("worker"), crashpoint.Step("worker")+"#3", crashpoint.PhaseDone("worker"),
			crashpoint.PhaseStart("addons"), crashpoint.PhaseDone("addons"),
			crashpoint.ApplyExecuted)
	}) {
		t.FailNow()
	}
	// A scenario run alone (-run 'TestChaosSandbox/serve') starts from a
	// converged cluster too.
	if ok, _, _ := c.converge(ctx, t, knobs{}, 1); !ok {
		t.Fatal("the cluster did not converge")
	}
	c.writeCanary(ctx, t)

	t.Run("etcd rolling change, killed at every step", func(t *testing.T) {
		c.killChain(ctx, t, "kill -9 of apply: etcd rolling change", knobs{etcd: 1}, true,
			crashpoint.ApplyLocked, crashpoint.PhaseStart("etcd"), crashpoint.EtcdSnapshotTaken,
			crashpoint.ReplaceStopped, crashpoint.Step("etcd")+"#1", crashpoint.ApplyExecuted)
	})
	t.Run("etcd member added, killed at every step", func(t *testing.T) {
		if ok, _, _ := c.converge(ctx, t, knobs{etcd: 1, node3NoEtcd: true}, 1); !ok {
			t.Fatal("node3's etcd member was not removed")
		}
		c.killChain(ctx, t, "kill -9 of apply: etcd member added", knobs{etcd: 1}, true,
			crashpoint.ApplyLocked, crashpoint.EtcdSnapshotTaken, crashpoint.EtcdLearnerAdded,
			crashpoint.Step("etcd")+"#1", crashpoint.PhaseDone("etcd"), crashpoint.ApplyExecuted)
	})
	t.Run("control-plane rolling change, killed at every step", func(t *testing.T) {
		c.killChain(ctx, t, "kill -9 of apply: control-plane rolling change", knobs{etcd: 1, api: 1}, true,
			crashpoint.ApplyLocked, crashpoint.PhaseStart("controlplane"), crashpoint.ReplaceStopped,
			crashpoint.Step("controlplane")+"#2", crashpoint.PhaseDone("controlplane"), crashpoint.ApplyExecuted)
	})
	t.Run("a node's Docker engine stopped during a control-plane rolling change", func(t *testing.T) {
		c.dockerStopped(ctx, t, knobs{etcd: 1, api: 2})
	})
	t.Run("a node partitioned during an etcd member replacement", func(t *testing.T) {
		c.partitioned(ctx, t, knobs{etcd: 2, api: 2})
	})
	t.Run("serve killed between a reconcile and its status commit", func(t *testing.T) {
		c.serveKilled(ctx, t, knobs{etcd: 2, api: 2, proxy: 1})
	})
	t.Run("the git repository gone during a status push", func(t *testing.T) {
		c.gitDown(ctx, t, knobs{etcd: 2, api: 2, proxy: 2})
	})
	t.Run("S3 down during a scheduled snapshot", func(t *testing.T) {
		c.s3Down(ctx, t, knobs{etcd: 2, api: 2, proxy: 2, s3: true})
	})
}

// chaos is what the scenarios of TestChaosSandbox share: the sandbox, the
// rigger binary, an Applier for the checks whose state directory is the
// applies' and serve's, the canary and the table's rows.
type chaos struct {
	sb              *sandbox.Sandbox
	bin             string
	a               *rt.Applier
	dir, serveState string
	canary          *corev1.ConfigMap
	// origin and port are serve's repository and webhook port.
	origin *origin
	port   int
	// gw is the S3 server, once a scenario started it.
	gw *s3test.Gateway

	mu   sync.Mutex
	rows []chaosRow
}

// chaosRow is one line of the table.
type chaosRow struct {
	scenario string
	// faults is how many faults were injected, recovered after how many
	// of them the next run went on (not refused, further than the fault).
	faults, recovered int
	// converged: the last run converged and a plan then changes nothing.
	converged bool
	// canary: "kept", "n/a" (written after), or what went wrong.
	canary string
	// members: "none" when etcd has each node's member once, else what.
	members string
	// resume is the longest time from a fault's end (a kill, the engine
	// or link back) to the next apply at work (its first phase), zero
	// where no apply follows.
	resume time.Duration
	// recovery is from the first fault's end to the cluster converged.
	recovery time.Duration
	note     string
}

// knobs are the settings the scenarios change, each a number written into
// a flag: etcd's --snapshot-count (an etcd rolling change), the API
// server's --max-requests-inflight (a control-plane rolling change),
// kube-proxy's --v. Zero leaves the flag out.
type knobs struct {
	etcd, api, proxy int
	// node3NoEtcd takes the etcd role from node3 (its member removed).
	node3NoEtcd bool
	// s3 sets backup_config with the suite's S3 server (chaos.gw).
	s3 bool
}

// yml is the sandbox cluster (the example's, the network plugin its only
// add-on, a short SSH connect timeout) with k's flags.
func (c *chaos) yml(t testing.TB, k knobs) string {
	t.Helper()
	roles := rt.Roles(3)
	if k.node3NoEtcd {
		roles[2] = []string{spec.RoleControlPlane, spec.RoleWorker}
	}
	y := sandboxtest.NetworkOnly(sandboxtest.ClusterYML(t, c.sb, roles))
	// The example's services start with its etcd, whose settings go
	// below its own (snapshot: false).
	services := "services:\n"
	if k.api > 0 {
		services += fmt.Sprintf("  kube-api:\n    extra_args:\n      max-requests-inflight: \"%d\"\n", 400+k.api)
	}
	services += "  etcd:\n"
	if k.etcd > 0 {
		services += fmt.Sprintf("    extra_args:\n      snapshot-count: \"%d\"\n", 10000+k.etcd)
	}
	if k.s3 {
		services += fmt.Sprintf("    backup_config:\n      interval_hours: 12\n      retention: 6\n      s3backupconfig:\n"+
			"        endpoint: %q\n        region: us-east-1\n        bucket_name: %s\n        folder: chaos\n"+
			"        access_key: %s\n        secret_key: %s\n        custom_ca: |\n          %s\n",
			c.gw.Endpoint, c.gw.Bucket, c.gw.Access, c.gw.Secret, strings.ReplaceAll(strings.TrimSpace(c.gw.CAPEM), "\n", "\n          "))
	}
	proxy := oneFlag
	if k.proxy > 0 {
		proxy += fmt.Sprintf("\n      v: \"%d\"", 2+k.proxy)
	}
	for _, r := range [][2]string{
		{"rigger:\n  ssh:\n", "rigger:\n  ssh:\n    connect_timeout: 3s\n"},
		{"services:\n  etcd:\n", services},
		{oneFlag, proxy},
	} {
		if !strings.Contains(y, r[0]) {
			t.Fatalf("the example cluster.yml changed: the chaos suite finds no %q to change", r[0])
		}
		y = strings.Replace(y, r[0], r[1], 1)
	}
	return y
}

// file writes the cluster.yml of k for the applies.
func (c *chaos) file(t testing.TB, k knobs) string {
	t.Helper()
	p := filepath.Join(c.dir, "cluster.yml")
	if err := os.WriteFile(p, []byte(c.yml(t, k)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *chaos) add(r chaosRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows = append(c.rows, r)
}

// table is the figures as a Markdown table.
func (c *chaos) table() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	b.WriteString("\n| scenario | faults | recovered | converged | canary | duplicate etcd member | next apply at work | time to recover |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range c.rows {
		conv := "no"
		if r.converged {
			conv = "yes"
		}
		resume := "-"
		if r.resume > 0 {
			resume = r.resume.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %d | %d/%d | %s | %s | %s | %s | %s |\n", r.scenario, r.faults, r.recovered, r.faults, conv,
			r.canary, r.members, resume, r.recovery.Round(time.Second))
	}
	for _, r := range c.rows {
		if r.note != "" {
			fmt.Fprintf(&b, "\n%s: %s\n", r.scenario, r.note)
		}
	}
	return b.String()
}

// applyProc is one `rigger apply` process.
type applyProc struct {
	cmd   *exec.Cmd
	start time.Time
	done  chan struct{}

	mu    sync.Mutex
	lines []string
	// atWork is when its first phase started (its first "==> " line).
	atWork time.Time
	// end is when it ended; killed whether by SIGKILL, code its exit code.
	end    time.Time
	killed bool
	code   int
}

// startApply starts `rigger apply --yes` of file with RIGGER_FAULT=fault
// (none when empty).
func (c *chaos) startApply(ctx context.Context, t testing.TB, file, fault string) *applyProc {
	t.Helper()
	cmd := exec.CommandContext(ctx, c.bin, "apply", "--yes", "-f", file, "--state-dir", c.a.StateDir)
	cmd.Env = append(os.Environ(), crashpoint.EnvVar+"="+fault)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	p := &applyProc{cmd: cmd, start: time.Now(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by its pid, when the test ends first
		<-p.done
	})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			if p.atWork.IsZero() && strings.HasPrefix(strings.TrimSpace(sc.Text()), "==> ") {
				p.atWork = time.Now()
			}
			p.mu.Unlock()
		}
	}()
	go func() {
		defer close(p.done)
		err := cmd.Wait()
		pw.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.end = time.Now()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		p.killed = ws.Signaled() && ws.Signal() == syscall.SIGKILL
		var ex *exec.ExitError
		if errors.As(err, &ex) {
			p.code = ex.ExitCode()
		}
	}()
	return p
}

// wait waits for the process to end.
func (p *applyProc) wait() *applyProc {
	<-p.done
	return p
}

// workAt is when it started its first phase; when it ended, for an apply
// that had nothing to do.
func (p *applyProc) workAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.atWork.IsZero() {
		return p.end
	}
	return p.atWork
}

func (p *applyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitLine waits until a line of the output holds all of subs; it fails
// the test when the process ends or timeout passes first.
func (p *applyProc) waitLine(t testing.TB, timeout time.Duration, subs ...string) {
	t.Helper()
	testwait.For(t, timeout, fmt.Sprintf("a progress line with %q", subs), func() error {
		p.mu.Lock()
		found := slices.ContainsFunc(p.lines, func(l string) bool {
			return !slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(l, s) })
		})
		p.mu.Unlock()
		if found {
			return nil
		}
		select {
		case <-p.done:
			t.Fatalf("no progress line with %q before the apply ended:\n%s", subs, p.output())
		default:
		}
		return fmt.Errorf("none in:\n%s", p.output())
	})
}

// refused says whether an apply was refused because another rigger held
// the cluster: after a kill -9, it must never be.
func (p *applyProc) refused() bool {
	out := p.output()
	return strings.Contains(out, "being changed by another rigger") || strings.Contains(out, "is held by")
}

// converge applies file without a fault until an apply exits 0 (at most
// tries times: an apply that finds a node still coming back fails), then
// checks that a plan changes nothing; it returns whether it converged,
// when its first apply started work, and when it ended.
func (c *chaos) converge(ctx context.Context, t *testing.T, k knobs, tries int) (ok bool, atWork, end time.Time) {
	t.Helper()
	file := c.file(t, k)
	for i := range tries {
		p := c.startApply(ctx, t, file, "").wait()
		if i == 0 {
			atWork = p.workAt()
		}
		if p.code == 0 && !p.killed {
			return c.inSync(ctx, t, k), atWork, p.end
		}
		t.Logf("apply %d of %d after the fault: exit %d:\n%s", i+1, tries, p.code, p.output())
	}
	return false, atWork, time.Now()
}

// inSync says whether a plan of k changes nothing, and fails t when it
// does.
func (c *chaos) inSync(ctx context.Context, t *testing.T, k knobs) bool {
	t.Helper()
	pl := c.a.Plan(ctx, t, rt.Load(t, c.yml(t, k)))
	if pl.Changes() {
		t.Errorf("not in sync: steps %v, Node changes %+v", rt.StepLines(pl.Plan), pl.NodeChanges)
		return false
	}
	return true
}

// killChain applies k with RIGGER_FAULT set to the points not passed yet,
// so that each apply is killed at the first of them it reaches, until
// none is left; then it converges, and adds the row. A point the
// applies never reach (an earlier apply did its work before it was
// killed) is noted, not a failure.
func (c *chaos) killChain(ctx context.Context, t *testing.T, scenario string, k knobs, canary bool, points ...string) {
	file := c.file(t, k)
	row := chaosRow{scenario: scenario}
	var killedAt []string
	var firstKill, lastKill time.Time
	resumed := func(at time.Time) {
		if !lastKill.IsZero() {
			row.resume = max(row.resume, at.Sub(lastKill))
		}
	}
	for len(points) > 0 {
		p := c.startApply(ctx, t, file, strings.Join(points, ",")).wait()
		resumed(p.workAt())
		if p.refused() {
			t.Errorf("the apply after a kill was refused:\n%s", p.output())
		}
		if !p.killed {
			t.Logf("not killed at any of %v: exit %d\n%s", points, p.code, p.output())
			if row.faults > 0 && p.code == 0 {
				row.recovered++ // the apply after the last kill converged
			}
			break
		}
		_, at, _ := strings.Cut(p.output(), crashpoint.EnvVar+": killed at ")
		at, _, _ = strings.Cut(at, "\n")
		i := slices.Index(points, at)
		if i < 0 {
			t.Fatalf("killed at %q, none of %v:\n%s", at, points, p.output())
		}
		if row.faults > 0 {
			row.recovered++ // the apply after the last kill went on, to a later point
		}
		row.faults++
		lastKill = p.end
		if firstKill.IsZero() {
			firstKill = p.end
		}
		killedAt = append(killedAt, at)
		t.Logf("killed at %s after %s (skipped, their work done: %v)", at, p.end.Sub(p.start).Round(100*time.Millisecond), points[:i])
		points = points[i+1:]
	}
	row.note = "killed at " + strings.Join(killedAt, ", ")
	ok, atWork, done := c.converge(ctx, t, k, 1)
	if len(points) == 0 {
		resumed(atWork)
		if ok {
			row.recovered++ // the apply after the last kill converged
		}
	}
	row.converged = ok
	row.recovery = done.Sub(firstKill)
	c.finish(ctx, t, &row, k, canary)
}

// finish checks the canary and etcd's members, and adds the row.
func (c *chaos) finish(ctx context.Context, t *testing.T, row *chaosRow, k knobs, canary bool) {
	t.Helper()
	row.canary, row.members = "n/a (written after)", c.members(ctx, t, k)
	if canary {
		row.canary = c.checkCanary(ctx, t, k)
	}
	c.add(*row)
	if !row.converged {
		t.Errorf("%s: did not converge again", row.scenario)
	}
}

// writeCanary writes the ConfigMap every later scenario reads back.
func (c *chaos) writeCanary(ctx context.Context, t *testing.T) {
	cs := c.a.Client(ctx, t, rt.Load(t, c.yml(t, knobs{})))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "chaos-canary", Namespace: "default"},
		Data: map[string]string{"written": time.Now().UTC().Format(time.RFC3339Nano)}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("write the canary: %v", err)
	}
	c.canary = cm
}

// checkCanary reads the canary back: "kept", or what is wrong.
func (c *chaos) checkCanary(ctx context.Context, t *testing.T, k knobs) string {
	t.Helper()
	if c.canary == nil {
		t.Error("no canary was written")
		return "not written"
	}
	cs := c.a.Client(ctx, t, rt.Load(t, c.yml(t, k)))
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, c.canary.Name, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Errorf("read the canary: %v", err)
		return "LOST: " + err.Error()
	case !maps.Equal(got.Data, c.canary.Data):
		t.Errorf("the canary is %v, was %v", got.Data, c.canary.Data)
		return "CHANGED"
	}
	return "kept"
}

// members waits until etcd has three healthy voting members, and says
// "none" when each node's is there once, else what is wrong.
func (c *chaos) members(ctx context.Context, t *testing.T, k knobs) string {
	t.Helper()
	cl := rt.Load(t, c.yml(t, k))
	var names []string
	rt.Eventually(ctx, t, 3*time.Minute, "three healthy etcd voters", func(ctx context.Context) (bool, error) {
		pl, err := c.a.Session(t, cl).Plan(ctx)
		if err != nil {
			return false, err
		}
		if pl.Observed.Etcd == nil {
			return false, fmt.Errorf("no etcd membership observed: %w", pl.Observed.EtcdErr)
		}
		names = nil
		for _, m := range pl.Observed.Etcd.Members {
			if !m.Healthy || m.IsLearner {
				return false, fmt.Errorf("member %s: healthy %v, learner %v %s", m.Name, m.Healthy, m.IsLearner, m.Error)
			}
			names = append(names, m.Name)
		}
		return len(names) >= 3, nil
	})
	slices.Sort(names)
	if len(names) != 3 || len(slices.Compact(slices.Clone(names))) != 3 {
		t.Errorf("etcd members %v: want each of the three nodes once", names)
		return fmt.Sprintf("YES: %v", names)
	}
	return "none"
}

// dockerStopped stops node3's Docker engine once the first node's API
// server is replaced and healthy during a control-plane rolling change,
// and starts it again once the apply has ended.
func (c *chaos) dockerStopped(ctx context.Context, t *testing.T, k knobs) {
	node := c.sb.Nodes[2].Name
	c.faultMidApply(ctx, t, "node3's dockerd stopped mid-apply (control-plane rolling change)", k, []string{"kube-apiserver healthy"},
		func(ctx context.Context) error { return c.sb.StopService(ctx, node, sandbox.ServiceDocker) },
		func(ctx context.Context) error { return c.sb.StartService(ctx, node, sandbox.ServiceDocker) })
}

// partitioned cuts node2 off once node1's etcd member is replaced and
// healthy during an etcd rolling change (node2's is next), and heals it
// once the apply has ended.
func (c *chaos) partitioned(ctx context.Context, t *testing.T, k knobs) {
	node := c.sb.Nodes[1].Name
	c.faultMidApply(ctx, t, "node2 partitioned during an etcd member replacement", k, []string{c.sb.Nodes[0].Address, "etcd healthy"},
		func(ctx context.Context) error { return c.sb.Partition(ctx, node) },
		func(ctx context.Context) error { return c.sb.Heal(ctx, node) })
}

// faultMidApply applies k, injects a fault once a progress line holds all
// of when, undoes it once the apply has ended (also when the test fails
// first), converges, and adds the row.
func (c *chaos) faultMidApply(ctx context.Context, t *testing.T, scenario string, k knobs, when []string, inject, undo func(context.Context) error) {
	row := chaosRow{scenario: scenario}
	p := c.startApply(ctx, t, c.file(t, k), "")
	p.waitLine(t, 10*time.Minute, when...)
	if err := inject(ctx); err != nil {
		t.Fatal(err)
	}
	undone := false
	defer func() {
		if !undone {
			_ = undo(context.WithoutCancel(ctx))
		}
	}()
	row.faults = 1
	p.wait()
	t.Logf("the apply with the fault: exit %d:\n%s", p.code, p.output())
	if p.code == 0 {
		row.note = "the apply finished before the fault mattered"
	}
	undone = true
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	ok, atWork, at := c.converge(ctx, t, k, 3)
	if ok {
		row.recovered = 1
	}
	row.converged, row.resume, row.recovery = ok, atWork.Sub(back), at.Sub(back)
	c.finish(ctx, t, &row, k, true)
}

// push commits and pushes the cluster.yml of k and returns its commit.
func (c *chaos) push(t *testing.T, msg string, k knobs) string {
	c.origin.pull(t)
	c.origin.commit(t, msg, map[string]string{clusterPath: c.yml(t, k)})
	c.origin.push(t)
	return c.origin.head(t)
}

// serveKilled pushes a change, starts serve with RIGGER_FAULT at its
// boundary between a reconcile and its status commit, and once it is
// killed there, starts serve again: the status of the change must be
// committed, the cluster in sync.
func (c *chaos) serveKilled(ctx context.Context, t *testing.T, k knobs) {
	row := chaosRow{scenario: "kill -9 of serve between a reconcile and its status commit"}
	change := c.push(t, "kube-proxy: log more", k)
	t.Setenv(crashpoint.EnvVar, crashpoint.ServeReconciled) // the serve started next inherits it
	killed := startServe(t, c.bin, "killed", c.origin, c.serveState, c.port, true)
	t.Setenv(crashpoint.EnvVar, "")
	killed.expectEnd()
	if !killed.waitRaw(15*time.Minute, crashpoint.EnvVar+": killed at "+crashpoint.ServeReconciled) {
		t.Fatalf("serve was not killed at %s:\n%s", crashpoint.ServeReconciled, killed.tail())
	}
	at0 := time.Now()
	killed.stop()
	row.faults = 1
	if out, err := exec.Command("git", "-C", c.origin.bare, "show", "main:"+statusPath).Output(); err == nil {
		if f := gitops.ParseStatus(out); f != nil && f.ObservedRevision == change {
			t.Errorf("the killed serve committed the status of %s", change)
		}
	}
	s := startServe(t, c.bin, "after", c.origin, c.serveState, c.port, true)
	c.origin.waitStatus(t, "the status of the change, after the kill", 10*time.Minute, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == change && ready(f) == "True"
	})
	row.recovered, row.converged, row.recovery = 1, true, time.Since(at0)
	s.stop()
	row.converged = c.inSync(ctx, t, k)
	c.finish(ctx, t, &row, k, true)
}

// gitDown moves serve's repository away once serve starts the reconcile
// of a pushed change, and back once its status push has failed: the status
// must be committed on the retry, nothing lost.
func (c *chaos) gitDown(ctx context.Context, t *testing.T, k knobs) {
	row := chaosRow{scenario: "git repository gone during a status push (serve)"}
	s := startServe(t, c.bin, "git-down", c.origin, c.serveState, c.port, true)
	if !s.waitLog(10*time.Minute, func(e logEntry) bool { return e.Msg == "reconcile done" }) {
		t.Fatalf("serve's first reconcile did not end:\n%s", s.tail())
	}
	since := time.Now()
	change := c.push(t, "kube-proxy: log more again", k)
	if !s.waitLog(5*time.Minute, func(e logEntry) bool {
		return e.Msg == "reconcile starts" && e.Trigger == "change" && e.Time.After(since)
	}) {
		t.Fatalf("serve did not start the reconcile of %s", change)
	}
	away := c.origin.bare + ".away"
	if err := os.Rename(c.origin.bare, away); err != nil {
		t.Fatal(err)
	}
	back := false
	defer func() {
		if !back {
			_ = os.Rename(away, c.origin.bare)
		}
	}()
	row.faults = 1
	if !s.waitLog(10*time.Minute, func(e logEntry) bool { return e.Msg == "write status.yml" && e.Time.After(since) }) {
		t.Fatalf("serve's status push did not fail with the repository gone:\n%s", s.tail())
	}
	if err := os.Rename(away, c.origin.bare); err != nil {
		t.Fatal(err)
	}
	back = true
	at0 := time.Now()
	c.origin.waitStatus(t, "the status of the change, once the repository is back", 5*time.Minute, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == change && ready(f) == "True"
	})
	row.recovered, row.recovery = 1, time.Since(at0)
	if log := c.origin.git(t, "log", "--format=%H", "main"); !strings.Contains(log, change) {
		t.Errorf("the change %s is gone from main", change)
	}
	s.stop()
	row.converged = c.inSync(ctx, t, k)
	c.finish(ctx, t, &row, k, true)
}

// s3Down takes the S3 server away, removes the snapshots from the nodes
// (so that a scheduled one is due at once), pushes backup_config with
// that S3 server and starts serve: it takes the scheduled snapshot on the
// nodes and reports the failed upload in status.yml, and the snapshot as
// not in S3. Once S3 is back, the report must go away and the snapshot be
// in S3; the recovery is until then.
func (c *chaos) s3Down(ctx context.Context, t *testing.T, k knobs) {
	row := chaosRow{scenario: "S3 server down during a scheduled snapshot (serve)"}
	c.gw = s3test.Start(t)
	c.gw.Stop()
	for _, n := range c.sb.Nodes {
		dir := filepath.Join(n.Dir, "opt-rke", "etcd-snapshots")
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, de := range entries {
			if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	change := c.push(t, "etcd: snapshots to S3", k)
	s := startServe(t, c.bin, "s3-down", c.origin, c.serveState, c.port, true)
	row.faults = 1
	st := c.origin.waitStatus(t, "a scheduled snapshot with S3 down", 10*time.Minute, func(f *gitops.StatusFile) bool {
		return f.ObservedRevision == change && f.Snapshots != nil && f.Snapshots.Last != nil && f.Snapshots.Error != ""
	})
	if st.Snapshots.Last.Kind != "scheduled" {
		t.Errorf("the last snapshot with S3 down is %+v, want a scheduled one", st.Snapshots.Last)
	}
	if !slices.Contains(st.Snapshots.NotInS3, st.Snapshots.Last.Name) {
		t.Errorf("status.yml with S3 down lists %v as not in S3, want %s among them", st.Snapshots.NotInS3, st.Snapshots.Last.Name)
	}
	t.Logf("with S3 down: snapshot %s, error %q, Ready %s", st.Snapshots.Last.Name, st.Snapshots.Error, ready(st))
	for _, n := range c.sb.Nodes {
		if _, err := os.Stat(filepath.Join(n.Dir, "opt-rke", "etcd-snapshots", st.Snapshots.Last.Name)); err != nil {
			t.Errorf("the snapshot taken with S3 down is not on %s: %v", n.Name, err)
		}
	}
	c.gw.Restart()
	at0 := time.Now()
	c.origin.waitStatus(t, "status.yml without the S3 error, S3 back", 10*time.Minute, func(f *gitops.StatusFile) bool {
		return f.Snapshots != nil && f.Snapshots.Error == "" && len(f.Snapshots.NotInS3) == 0 && ready(f) == "True"
	})
	row.recovered, row.recovery = 1, time.Since(at0)
	uploaded := 0
	for obj := range c.gw.Client.ListObjects(ctx, c.gw.Bucket, minio.ListObjectsOptions{Prefix: "chaos/", Recursive: true}) {
		if obj.Err == nil && strings.HasSuffix(obj.Key, st.Snapshots.Last.Name) {
			uploaded++
		}
	}
	if uploaded == 0 {
		t.Errorf("the snapshot %s taken while S3 was down is not in S3 once status.yml says S3 lacks nothing", st.Snapshots.Last.Name)
	}
	s.stop()
	row.converged = c.inSync(ctx, t, k)
	c.finish(ctx, t, &row, k, true)
}
