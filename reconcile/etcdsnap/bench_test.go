package etcdsnap_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// BenchmarkSnapshotSandbox compares, on one etcd member of a one-node
// sandbox cluster, a whole `rigger snapshot save` (find a healthy member,
// save, `snapshot status`, sha256 on the node, sidecar) with a plain
// `etcdctl snapshot save` in a one-shot container of the etcd image. Run it
// with make bench (as root).
func BenchmarkSnapshotSandbox(b *testing.B) {
	s := sandboxtest.Start(b, sandbox.Options{Subnet: 4, Nodes: 1, Images: true})
	ctx := context.Background()
	all := []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}
	path := filepath.Join(b.TempDir(), "cluster.yml")
	if err := os.WriteFile(path, []byte(sandboxtest.ClusterYML(b, s, map[int][]string{0: all})), 0o600); err != nil {
		b.Fatal(err)
	}
	c, _, err := spec.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	sess, err := reconcile.Open(c, reconcile.Options{StateDir: filepath.Join(b.TempDir(), "state")})
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	pl, err := sess.Plan(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sess.Apply(ctx, pl, reconcile.ApplyOptions{}); err != nil {
		b.Fatal(err)
	}

	b.Run("rigger", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
			if _, err := sess.SaveSnapshot(ctx, reconcile.SnapshotOptions{Name: name}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if _, err := sess.DeleteSnapshot(ctx, name, false); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})

	d, err := desired.Build(c)
	if err != nil {
		b.Fatal(err)
	}
	etcd, _ := d.Nodes[0].Container(desired.Etcd)
	var env []string
	for _, e := range etcd.Env {
		if strings.HasPrefix(e, "ETCDCTL_") {
			env = append(env, e)
		}
	}
	n := s.Nodes[0]
	cli := dockerClient(b, n)
	b.Run("etcdctl", func(b *testing.B) {
		for b.Loop() {
			if _, err := dockerop.RunOutput(ctx, cli, n.Address, etcd.Image,
				[]string{"etcdctl", "snapshot", "save", "/tmp/bench.db"},
				dockerop.RunOptions{Binds: []string{"/etc/kubernetes:/etc/kubernetes:ro"}, Env: env, NetworkMode: "host"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
