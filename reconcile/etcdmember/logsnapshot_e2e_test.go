package etcdmember_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// TestSnapshotLogsRealEtcd runs the etcd the sandbox builds: a member
// started on 3.5, then 3.6, moves to 3.7 after SnapshotLogs, and a copy of
// its data moved without it does not start (3.7 cannot apply the entries
// 3.5 wrote, which 3.6 keeps in its log until its next snapshot).
func TestSnapshotLogsRealEtcd(t *testing.T) {
	sandboxtest.SkipUnlessLong(t)
	releases := sandbox.KubeReleases()
	v35, v36, v37 := sandbox.EtcdVersion, releases[len(releases)-2].Etcd, releases[len(releases)-1].Etcd
	if !strings.HasPrefix(v36, "v3.6.") || !strings.HasPrefix(v37, "v3.7.") {
		t.Fatalf("the sandbox's newest releases run etcd %s and %s, not 3.6 and 3.7", v36, v37)
	}
	bin := func(v string) string { return etcdBinary(t, v) }
	data := t.TempDir()
	m := member{t: t, data: filepath.Join(data, "etcd")}
	m.run(bin(v35), func(c *etcdmember.Client) { m.put(c, "/test/written-by", "3.5") })
	m.run(bin(v36), func(c *etcdmember.Client) { m.put(c, "/test/written-by", "3.6") })

	without := member{t: t, data: filepath.Join(data, "without")}
	if out, err := exec.Command("cp", "-a", m.data, without.data).CombinedOutput(); err != nil {
		t.Fatalf("copy the data directory: %v: %s", err, out)
	}
	if log, err := without.fails(bin(v37)); err != nil {
		t.Fatalf("etcd %s started on the data of 3.6 that had saved no snapshot since 3.5: the test shows nothing (%v)\n%s", v37, err, log)
	}

	m.run(bin(v36), func(c *etcdmember.Client) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		got, err := c.SnapshotLogs(ctx, "3.6")
		if err != nil {
			t.Fatalf("SnapshotLogs: %v", err)
		}
		t.Logf("SnapshotLogs: %d written in %s, saved by %v, skipped %v", got.Written, got.Took, got.Members, got.Skipped)
		if len(got.Members) != 1 || len(got.Skipped) != 0 {
			t.Fatalf("SnapshotLogs: members %v, skipped %v; want the one member", got.Members, got.Skipped)
		}
		if v, _, err := c.Get(ctx, etcdmember.LogSnapshotKey); err != nil || v != nil {
			t.Fatalf("%s after SnapshotLogs: %q, %v; want it deleted", etcdmember.LogSnapshotKey, v, err)
		}
	})
	m.run(bin(v37), func(c *etcdmember.Client) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if v, _, err := c.Get(ctx, "/test/written-by"); err != nil || string(v) != "3.6" {
			t.Fatalf("etcd %s reads /test/written-by as %q, %v; want 3.6", v37, v, err)
		}
	})
}

// etcdBinary is the etcd of version v the sandbox built into its cache.
func etcdBinary(t *testing.T, v string) string {
	t.Helper()
	cache := os.Getenv("RIGGER_CACHE")
	if cache == "" {
		cache = "/var/cache/rigger"
	}
	dir := filepath.Join(cache, "etcd", v)
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		t.Fatalf("etcd %s is not built in %s: rigger sandbox images builds RKE's, make long-images the others", v, dir)
	}
	return filepath.Join(dir, "etcd")
}

// member is one etcd member on 127.0.0.1 with its data in data.
type member struct {
	t    *testing.T
	data string
}

// proc is a running etcd.
type proc struct {
	cmd    *exec.Cmd
	url    string
	log    string
	exited chan error
}

// start starts etcd from bin on free ports, its log beside the data
// directory; the test's cleanup kills it.
func (m member) start(bin string) *proc {
	m.t.Helper()
	p := &proc{url: "http://" + freeAddr(m.t), exited: make(chan error, 1)}
	peer := "http://" + freeAddr(m.t)
	p.log = fmt.Sprintf("%s-%s.log", m.data, filepath.Base(filepath.Dir(bin)))
	f, err := os.Create(p.log)
	if err != nil {
		m.t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(bin, "--name=m", "--data-dir="+m.data,
		"--listen-client-urls="+p.url, "--advertise-client-urls="+p.url,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=m="+peer)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	m.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.exited <- nil
	})
	return p
}

// run starts etcd from bin, calls f with a client once it answers, then
// stops it.
func (m member) run(bin string, f func(*etcdmember.Client)) {
	m.t.Helper()
	p := m.start(bin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var d net.Dialer
	c, err := etcdmember.Dial(ctx, []string{p.url}, nil, func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
	if err != nil {
		m.t.Fatalf("%s: %v", bin, err)
	}
	defer c.Close()
	for {
		_, _, err := c.Get(ctx, "/test/up")
		if err == nil {
			break
		}
		select {
		case werr := <-p.exited:
			p.exited <- werr
			m.t.Fatalf("%s exited (%v):\n%s", bin, werr, tail(p.log))
		case <-ctx.Done():
			m.t.Fatalf("%s does not answer after a minute (%v):\n%s", bin, err, tail(p.log))
		case <-time.After(200 * time.Millisecond):
		}
	}
	f(c)
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case werr := <-p.exited:
		p.exited <- werr
	case <-time.After(30 * time.Second):
		m.t.Fatalf("%s did not stop within 30 s of SIGINT", bin)
	}
}

// fails starts etcd from bin and returns its log and nil when it exits
// within a minute, panicking, as a member that cannot apply its log does.
func (m member) fails(bin string) (string, error) {
	p := m.start(bin)
	select {
	case werr := <-p.exited:
		p.exited <- werr
		if b, _ := os.ReadFile(p.log); !strings.Contains(string(b), `"level":"panic"`) {
			return tail(p.log), fmt.Errorf("exited (%v) without a panic", werr)
		}
		return tail(p.log), nil
	case <-time.After(time.Minute):
		return tail(p.log), fmt.Errorf("still running after a minute")
	}
}

func (m member) put(c *etcdmember.Client, key, value string) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.KV().Put(ctx, key, value); err != nil {
		m.t.Fatalf("put %s: %v", key, err)
	}
}

// tail is the last lines of the log file.
func tail(log string) string {
	b, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}
