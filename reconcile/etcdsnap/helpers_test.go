package etcdsnap_test

import (
	"context"
	"strings"
	"testing"

	rt "github.com/rigger/rigger/reconcile/reconciletest"

	"github.com/docker/docker/client"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/spec"
)

// loadCluster is the example sandbox cluster on every node of s, each with
// every role, with the network plugin as its only add-on, changed by each
// change.
func loadCluster(t testing.TB, s *sandbox.Sandbox, changes ...func(*spec.Cluster)) *spec.Cluster {
	t.Helper()
	return rt.Cluster(t, s, rt.Roles(len(s.Nodes)), append([]func(*spec.Cluster){rt.NetworkOnly}, changes...)...)
}

// etcdctlOn returns a function that runs etcdctl against the etcd member of
// the cluster's first node (etcdctlTry) and returns its output; an error
// fails the test.
func etcdctlOn(ctx context.Context, t testing.TB, c *spec.Cluster, cli *client.Client, node string) func(args ...string) []byte {
	etcdctl := etcdctlTry(t, c, cli, node)
	return func(args ...string) []byte {
		t.Helper()
		out, err := etcdctl(ctx, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// etcdctlTry returns a function that runs etcdctl against the etcd member
// of the cluster's first node, in a one-shot container of the etcd image
// with the member's ETCDCTL_* settings, and returns its output.
func etcdctlTry(t testing.TB, c *spec.Cluster, cli *client.Client, node string) func(ctx context.Context, args ...string) ([]byte, error) {
	t.Helper()
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
	return func(ctx context.Context, args ...string) ([]byte, error) {
		return dockerop.RunOutput(ctx, cli, node, etcd.Image, append([]string{"etcdctl"}, args...), dockerop.RunOptions{
			Binds: []string{"/etc/kubernetes:/etc/kubernetes:ro"}, Env: env, NetworkMode: "host"})
	}
}
