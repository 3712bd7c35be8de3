package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/gitops/replicas"
	"github.com/rigger/rigger/gitops/webhook"
	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// TestServeShared (RIGGER_E2E=1: a real API server) runs two real `rigger
// serve --leader-elect` processes on a repository of two clusters whose
// nodes refuse every connection, and checks serve's wiring of the
// sharing: both are ready; each holds one cluster's Lease, which its
// /metrics and the cluster's status.yml name; a push posted to the webhook
// of the replica that does not hold the changed cluster is applied by the
// one that does (--interval is an hour: only the relayed webhook makes it
// fetch); one stopped with SIGTERM hands its cluster over to the other
// sooner than the lease duration. The Leases' timing is the defaults' (a
// renewal may take 20 s): on a loaded machine, renewals of a few seconds
// failed, and the clusters moved between the replicas meanwhile.
func TestServeShared(t *testing.T) {
	const leaseDuration = 40 * time.Second
	api := apiservertest.Start(t, apiservertest.Options{})
	kubeconfig := api.WriteKubeconfig(t)
	client, err := kubernetes.NewForConfig(api.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns, secret = "rigger-system", "the webhook secret of TestServeShared"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bin := sandboxtest.BuildRigger(t)

	dir := t.TempDir()
	bare, work := filepath.Join(dir, "origin.git"), filepath.Join(dir, "work")
	run := func(in string, args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = in
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Human", "GIT_AUTHOR_EMAIL=human@example.test",
			"GIT_COMMITTER_NAME=Human", "GIT_COMMITTER_EMAIL=human@example.test")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return string(out), fmt.Errorf("git %v: %w\n%s", args, err, out)
		}
		return string(out), nil
	}
	git := func(in string, args ...string) string {
		t.Helper()
		out, err := run(in, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	git(dir, "init", "-q", "--bare", "-b", "main", bare)
	git(dir, "clone", "-q", bare, work)
	git(work, "checkout", "-q", "-b", "main")
	yml := func(name string) string {
		return "cluster_name: " + name + "\nssh_key_path: " + dir + "/no-key\nnodes:\n" +
			"  - {address: 127.0.0.1, port: \"1\", user: u, role: [etcd, controlplane, worker]}\n"
	}
	paths := []string{"clusters/one/cluster.yml", "clusters/two/cluster.yml"}
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Join(work, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, p), []byte(yml(filepath.Base(filepath.Dir(p)))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(work, "add", ".")
	git(work, "commit", "-q", "-m", "two clusters")
	git(work, "push", "-q", "origin", "main")
	secretFile := filepath.Join(dir, "webhook-secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}

	start := func(name string) *sharedServe {
		port := freeLocalPort(t)
		d := filepath.Join(dir, name)
		s := &sharedServe{name: name, url: fmt.Sprintf("http://127.0.0.1:%d", port)}
		s.cmd = exec.Command(bin, "serve", "--repo", "file://"+bare, "--branch", "main", "--path", "clusters",
			"--state-dir", filepath.Join(d, "state"), "--workdir", filepath.Join(d, "clone"), "--listen", fmt.Sprintf("127.0.0.1:%d", port),
			"--interval", "1h", "--webhook-secret-file", secretFile, "--author", "rigger <rigger@example.test>", "--log-format", "json",
			"--leader-elect", "--kubeconfig", kubeconfig, "--lease-namespace", ns, "--advertise-url", s.url,
			"--lease-duration", leaseDuration.String(), "--lease-renew-deadline", "20s", "--lease-retry-period", "1s")
		stderr, err := s.cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		s.done = make(chan struct{})
		go func() {
			sc := bufio.NewScanner(stderr)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				s.mu.Lock()
				s.log = append(s.log, sc.Text())
				s.mu.Unlock()
			}
			s.err = s.cmd.Wait()
			close(s.done)
		}()
		t.Cleanup(func() {
			select {
			case <-s.done:
			default:
				_ = s.cmd.Process.Kill()
				<-s.done
			}
			if t.Failed() {
				s.mu.Lock()
				t.Logf("serve %s's log ends:\n%s", s.name, strings.Join(s.log[max(len(s.log)-30, 0):], "\n"))
				s.mu.Unlock()
			}
		})
		return s
	}
	a, b := start("a"), start("b")
	for _, s := range []*sharedServe{a, b} {
		testwait.For(t, time.Minute, "serve "+s.name+" ready: every replica is", func() bool { return s.get("/readyz") == http.StatusOK })
	}

	// holders maps each cluster's path to its Lease's holder.
	holders := func() (map[string]string, error) {
		l, err := client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.Set{replicas.LabelCluster: "rigger-serve"}.String()})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, x := range l.Items {
			if x.Spec.HolderIdentity != nil && *x.Spec.HolderIdentity != "" {
				out[x.Annotations[replicas.AnnotationPath]] = *x.Spec.HolderIdentity
			}
		}
		return out, nil
	}
	var h map[string]string
	testwait.For(t, time.Minute, "each replica holding one cluster", func() error {
		var err error
		if h, err = holders(); err != nil {
			return err
		}
		if len(h) != 2 || h[paths[0]] == h[paths[1]] {
			return fmt.Errorf("holders %v, want one cluster each", h)
		}
		return nil
	})
	byID := map[string]*sharedServe{}
	for _, s := range []*sharedServe{a, b} {
		testwait.For(t, time.Minute, "serve "+s.name+" logging the cluster it holds", func() bool {
			for _, p := range paths {
				if line := s.find(`"msg":"holding the cluster's Lease: this replica reconciles it"`, `"path":"`+p+`"`); line != "" {
					if id := h[p]; strings.Contains(line, fmt.Sprintf("%q", id)) {
						byID[id] = s
						return true
					}
				}
			}
			return false
		})
	}
	if len(byID) != 2 {
		t.Fatalf("replicas by holder id: %v, want both", byID)
	}
	aHolds := paths[0]
	if byID[h[aHolds]] != a {
		aHolds = paths[1]
	}
	bHolds := paths[0]
	if bHolds == aHolds {
		bHolds = paths[1]
	}
	if m := a.body("/metrics"); !strings.Contains(m, `rigger_cluster_lease_held{path="`+aHolds+`"`) || strings.Contains(m, `path="`+bHolds+`"`) {
		t.Errorf("serve a's /metrics does not say it holds %s alone:\n%s", aHolds, grepLines(m, "rigger_cluster_lease_held"))
	}
	testwait.For(t, time.Minute, "status.yml of "+bHolds+" naming its holder", func() error {
		git(work, "pull", "-q", "--rebase", "origin", "main")
		st, err := os.ReadFile(filepath.Join(work, filepath.Dir(bHolds), "status.yml"))
		if err != nil {
			return err
		}
		if !strings.Contains(string(st), "replica: "+h[bHolds]) {
			return fmt.Errorf("status.yml:\n%s\nwant replica: %s", st, h[bHolds])
		}
		return nil
	})

	// A push posted to a, of the cluster b holds.
	if err := os.WriteFile(filepath.Join(work, bHolds), []byte(yml(filepath.Base(filepath.Dir(bHolds)))+"# changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(work, "commit", "-q", "-am", "change "+bHolds)
	// As a person would: the replicas commit their status to the branch
	// too, and a push behind one of theirs is refused until rebased.
	testwait.For(t, time.Minute, "the change pushed", func() error {
		_, err := run(work, "push", "-q", "origin", "main")
		if err == nil {
			return nil
		}
		if _, perr := run(work, "pull", "-q", "--rebase", "origin", "main"); perr != nil {
			return perr
		}
		return err
	})
	payload := `{"ref":"refs/heads/main"}`
	req, err := http.NewRequest(http.MethodPost, a.url+webhook.Path([]byte(secret)), strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Rigger-Signature-256", webhook.Sign([]byte(secret), []byte(payload)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("webhook to serve a: status %d, want 202", resp.StatusCode)
	}
	testwait.For(t, 30*time.Second, "serve b reconciling the change of "+bHolds+" that serve a's webhook received", func() bool {
		return b.find(`"msg":"reconcile starts"`, `"path":"`+bHolds+`"`, `"trigger":"change"`) != ""
	})

	// Within 30 s: a Lease serve a renewed last at most a retry period
	// before its SIGTERM expires no sooner than 39 s after it, so b took it
	// because a handed it over.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "serve b holding both clusters, handed over by serve a", func() error {
		h, err := holders()
		if err != nil {
			return err
		}
		for _, p := range paths {
			if byID[h[p]] != b {
				return fmt.Errorf("holders %v", h)
			}
		}
		return nil
	})
	select {
	case <-a.done:
		if a.err != nil {
			t.Errorf("serve a after SIGTERM: %v", a.err)
		}
	case <-time.After(30 * time.Second):
		t.Error("serve a still runs 30s after SIGTERM")
	}
}

// sharedServe is a serve process of TestServeShared.
type sharedServe struct {
	name, url string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
	mu        sync.Mutex
	log       []string
}

func (s *sharedServe) get(path string) int {
	resp, err := http.Get(s.url + path)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func (s *sharedServe) body(path string) string {
	resp, err := http.Get(s.url + path)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// find is the first log line holding every one of subs.
func (s *sharedServe) find(subs ...string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.log {
		ok := true
		for _, sub := range subs {
			ok = ok && strings.Contains(l, sub)
		}
		if ok {
			return l
		}
	}
	return ""
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func freeLocalPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
