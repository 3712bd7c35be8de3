package etcdsnap_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// loadCluster is the example sandbox cluster on every node of s, each with
// every role, changed by change (which may be nil).
func loadCluster(t testing.TB, s *sandbox.Sandbox, change func(*spec.Cluster)) *spec.Cluster {
	t.Helper()
	all := []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}
	roles := map[int][]string{}
	for i := range s.Nodes {
		roles[i] = all
	}
	path := filepath.Join(t.TempDir(), "cluster.yml")
	if err := os.WriteFile(path, []byte(sandboxtest.ClusterYML(t, s, roles)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, diags, err := spec.Load(path)
	if err != nil {
		t.Fatalf("%v\n%v", err, diags)
	}
	c.Rigger.SSH.ConnectTimeout = spec.Duration(3 * time.Second)
	if change != nil {
		change(c)
	}
	return c
}

// openSession opens a session on c with the state directory, closed when
// the test ends.
func openSession(t testing.TB, c *spec.Cluster, stateDir string) *reconcile.Session {
	t.Helper()
	sess, err := reconcile.Open(c, reconcile.Options{StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// apply plans and applies with sess.
func apply(ctx context.Context, t testing.TB, sess *reconcile.Session) {
	t.Helper()
	pl, err := sess.Plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Apply(ctx, pl, reconcile.ApplyOptions{}); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// etcdctlOn returns a function that runs etcdctl against the etcd member of
// the cluster's first node, in a one-shot container of the etcd image with
// the member's ETCDCTL_* settings, and returns its output.
func etcdctlOn(ctx context.Context, t testing.TB, c *spec.Cluster, cli *client.Client, node string) func(args ...string) []byte {
	d, err := desired.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	etcd, ok := d.Nodes[0].Container(desired.Etcd)
	if !ok {
		t.Fatal("the first node runs no etcd")
	}
	var env []string
	for _, e := range etcd.Env {
		if strings.HasPrefix(e, "ETCDCTL_") {
			env = append(env, e)
		}
	}
	return func(args ...string) []byte {
		t.Helper()
		out, err := dockerop.RunOutput(ctx, cli, node, etcd.Image, append([]string{"etcdctl"}, args...), dockerop.RunOptions{
			Binds: []string{"/etc/kubernetes:/etc/kubernetes:ro"}, Env: env, NetworkMode: "host"})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}
