package coldconverge_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/plan"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/sandbox/smoke"
	"github.com/rigger/rigger/spec"
)

// coldRunsEnv is how many cold converges TestColdConverges makes (make
// test-cold sets it, and make test TEST_COLD_RUNS=N); unset or 0, the test
// is skipped.
const coldRunsEnv = "RIGGER_COLD_RUNS"

// TestColdConverges is what a newcomer's first `make demo` does, many
// times in a row on a busy machine: the example cluster (flannel, CoreDNS,
// metrics-server, the kubelet through cri-dockerd) applied to three fresh
// sandbox nodes while another process keeps one of the two cores busy.
// Each converge must succeed on its first apply, and a pod on the first
// node must then fetch a page from a pod on the third. Every other run
// injects the race of the network plugin with kube-proxy: on the second
// node kube-proxy is created only once flannel there holds its subnet
// lease (reconciletest.HoldKubeProxy). The last run's cluster is then torn
// down by a `rigger remove` stopped half-way, and applied again
// (testInterruptedRemove).
//
// Each run's timeline is in the test log (go test -v); a table of the runs
// closes it.
func TestColdConverges(t *testing.T) {
	runs, err := strconv.Atoi(os.Getenv(coldRunsEnv))
	if err != nil || runs < 1 {
		t.Skipf("set %s=N (make test-cold, make test TEST_COLD_RUNS=N) to converge N fresh sandboxes in a row", coldRunsEnv)
	}
	var current atomic.Pointer[sandbox.Sandbox] // the run's, for the hog
	stopHog := cpuHog(t, current.Load)
	defer stopHog()

	type result struct {
		hold         bool
		apply, smoke time.Duration
		err          string
	}
	var results []result
	defer func() {
		var b strings.Builder
		fmt.Fprintf(&b, "%d cold converge(s), one core or more kept busy (by the hog or other work: its line says):\n", len(results))
		fmt.Fprintf(&b, "%-4s %-22s %-10s %-8s %s\n", "run", "kube-proxy held back", "apply", "smoke", "result")
		for i, r := range results {
			res := "ok"
			if r.err != "" {
				res = "FAILED: " + r.err
			}
			fmt.Fprintf(&b, "%-4d %-22v %-10s %-8s %s\n", i+1, r.hold, r.apply.Round(100*time.Millisecond), r.smoke.Round(100*time.Millisecond), res)
		}
		t.Log(b.String())
	}()

	for i := range runs {
		hold := i%2 == 1
		ok := t.Run(fmt.Sprintf("run %d", i+1), func(t *testing.T) {
			r := result{hold: hold}
			defer func() {
				if t.Failed() && r.err == "" {
					r.err = "see the run's log"
				}
				results = append(results, r)
			}()
			ctx, cancel := rt.UntilTestDeadline(t)
			defer cancel()
			s := sandboxtest.Start(t, sandbox.Options{Subnet: 29, Nodes: 3, Images: true})
			current.Store(s)
			a := rt.New(t)
			c := rt.Cluster(t, s, rt.Roles(3))
			held := make(chan struct{})
			if hold {
				a.Open = rt.HoldKubeProxy(t, s.Nodes[1].Address, s.Nodes[1].Hostname, held)
			}
			began := time.Now()
			if _, _, err := a.TryApply(ctx, t, c); err != nil {
				r.err = "first apply: " + firstLine(err.Error())
				t.Fatalf("the first apply of a cold converge failed: %v", err)
			}
			r.apply = time.Since(began)
			a.Open = nil
			if hold {
				select {
				case <-held:
				default:
					t.Errorf("kube-proxy on %s was never held back: the fault was not injected", s.Nodes[1].Hostname)
				}
			}
			began = time.Now()
			if res, err := (smoke.Check{Client: a.Client(ctx, t, c), Image: sandbox.ToolsImage,
				ServerNode: s.Nodes[2].Hostname, ClientNode: s.Nodes[0].Hostname, Progress: func(msg string) { t.Log(msg) }}).Run(ctx); err != nil {
				r.err = "smoke: " + firstLine(err.Error())
				t.Fatalf("smoke test after the first apply: %v (%+v)", err, res)
			}
			r.smoke = time.Since(began)
			a.InSync(ctx, t, c)
			if i == runs-1 {
				t.Run("a remove stopped half-way, then apply", func(t *testing.T) { testInterruptedRemove(ctx, t, a, s) })
			}
		})
		if !ok {
			break
		}
	}
}

// testInterruptedRemove tears the converged cluster down with a remove
// stopped once its first node was cleaned (its containers removed, its
// /etc/kubernetes, /etc/cni and etcd data emptied) while the others keep
// theirs, then applies it again. The apply must bring every Node back to
// Ready, or fail naming the node and why. (With every node in etcd, the
// cleaned node's new etcd member cannot join the members that remember
// its old one: etcd says "member … has already been bootstrapped", and the
// apply fails naming the node with etcd's last lines.) When it succeeds, a
// container whose stop the remove had asked for may still have been
// running when the apply's plan looked, and stopped after it: an apply
// more then restarts it, and the plan after that is empty.
func testInterruptedRemove(ctx context.Context, t *testing.T, a *rt.Applier, s *sandbox.Sandbox) {
	c := rt.Cluster(t, s, rt.Roles(3))
	a.Open = func(c *spec.Cluster, o reconcile.Options) (*reconcile.Session, error) {
		o.Teardown = true
		return reconcile.Open(c, o)
	}
	sess := a.Session(t, c)
	a.Open = nil
	lk := a.Lock(ctx, t, sess)
	pl, err := sess.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	cleaned := ""
	_, err = sess.Apply(rctx, lk, pl, reconcile.ApplyOptions{Hooks: plan.Hooks{Step: func(node, msg string, err error) {
		t.Logf("remove: %s: %s (%v)", node, msg, err)
		if cleaned == "" && err == nil && strings.HasPrefix(msg, "cleaned ") {
			cleaned = node
			stop()
		}
	}}})
	lk.Release()
	if cleaned == "" {
		t.Fatalf("the remove ended (%v) before it cleaned a node: nothing was interrupted", err)
	}
	t.Logf("remove stopped once %s was cleaned: %v", cleaned, err)
	if _, _, err := a.TryApply(ctx, t, c); err != nil {
		if !strings.Contains(err.Error(), "node "+cleaned) {
			t.Fatalf("apply after an interrupted remove failed without naming the cleaned node %s: %v", cleaned, err)
		}
		t.Logf("apply after an interrupted remove failed, naming the cleaned node: %v", err)
		return
	}
	// The admin kubeconfig reaches the first controlplane node's API server,
	// which may be one whose stop was under way: the Nodes are checked once
	// the apply after it restarted it.
	if pl := a.Plan(ctx, t, c); pl.Changes() {
		t.Logf("plan after the first apply: %v, Node changes %+v (containers whose stop was under way): applying again",
			rt.StepLines(pl.Plan), pl.NodeChanges)
		a.Apply(ctx, t, c)
	}
	rt.NodesReady(ctx, t, a.Client(ctx, t, c), s.Nodes)
	a.InSync(ctx, t, c)
}

// cpuHog keeps one core busy with another process, as a build or a second
// test keeps a newcomer's machine busy; stop ends it (by its pid, also when
// the test fails; the kernel kills it if the test's process dies). It runs only while the rest of
// the machine (all but the hog, this test's process and s's nodes, whose
// cgroups count their CPU) keeps less than a core busy: beside other
// tests, which keep the machine busy already, it stops (SIGSTOP) rather
// than add a core's worth of spinning to them. nodes gives the sandbox of
// the run under way (nil before the first).
func cpuHog(t *testing.T, nodes func() *sandbox.Sandbox) (stop func()) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	// Killed with the test's process, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the CPU hog: %v", err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		var running, paused time.Duration
		defer func() {
			t.Logf("CPU hog: spinning %s, stopped %s while the machine's other work kept a core busy", running.Round(time.Second), paused.Round(time.Second))
		}()
		const every = 500 * time.Millisecond
		tick := time.NewTicker(every)
		defer tick.Stop()
		last := othersCPU(pid, nodes())
		stopped := false
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			now := othersCPU(pid, nodes())
			busy := now.since(last)
			last = now
			switch {
			case busy >= 1 && !stopped:
				stopped = syscall.Kill(-pid, syscall.SIGSTOP) == nil
			case busy < 1 && stopped:
				stopped = syscall.Kill(-pid, syscall.SIGCONT) != nil
			}
			if stopped {
				paused += every
			} else {
				running += every
			}
		}
	}()
	ended := false
	stop = func() {
		if ended {
			return
		}
		ended = true
		close(done)
		<-watched
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		_ = cmd.Wait()
	}
	t.Cleanup(stop)
	return stop
}

// cpuSample is the machine's busy CPU time but the hog's, this process's
// and a sandbox's nodes', at a time.
type cpuSample struct {
	at   time.Time
	busy time.Duration
}

// since is how many cores the sample's CPU kept busy on average since
// before.
func (s cpuSample) since(before cpuSample) float64 {
	if d := s.at.Sub(before.at); d > 0 {
		return float64(s.busy-before.busy) / float64(d)
	}
	return 0
}

// othersCPU samples the machine's busy CPU (/proc/stat) less that of the
// hog's process group (pid), this process and the cgroups of s's nodes.
func othersCPU(pid int, s *sandbox.Sandbox) cpuSample {
	at := time.Now()
	busy := machineBusy() - procCPU(pid) - procCPU(os.Getpid())
	if s != nil {
		busy -= s.NodesCPU()
	}
	return cpuSample{at: at, busy: busy}
}

// clockTick is the kernel's USER_HZ, the unit of /proc's CPU times.
const clockTick = 100

// machineBusy is the CPU time every core spent on anything but idling
// and waiting for I/O since boot.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var busy int64
	for i, f := range strings.Fields(line)[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, _ := strconv.ParseInt(f, 10, 64)
		busy += v
	}
	return time.Duration(busy) * time.Second / clockTick
}

// procCPU is the CPU time (user and system) process pid has spent.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * time.Second / clockTick
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
