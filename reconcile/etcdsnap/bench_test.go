package etcdsnap_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// BenchmarkSnapshotSandbox compares, on one etcd member of a one-node
// sandbox cluster, a whole `rigger snapshot save` (find a healthy member,
// save, `snapshot status`, sha256 on the node, sidecar) with a plain
// `etcdctl snapshot save` in a one-shot container of the etcd image. Run it
// with make bench (as root).
func BenchmarkSnapshotSandbox(b *testing.B) {
	s := sandboxtest.Start(b, sandbox.Options{Subnet: 4, Nodes: 1, Images: true})
	ctx := context.Background()
	c := loadCluster(b, s, nil)
	sess := openSession(b, c, filepath.Join(b.TempDir(), "state"))
	apply(ctx, b, sess)

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

	n := s.Nodes[0]
	etcdctl := etcdctlOn(ctx, b, c, sandboxtest.DockerClient(b, n), n.Address)
	b.Run("etcdctl", func(b *testing.B) {
		for b.Loop() {
			etcdctl("snapshot", "save", "/tmp/bench.db")
		}
	})
}
