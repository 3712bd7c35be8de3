package etcdsnap_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/etcdsnap"
	rt "github.com/rigger/rigger/reconcile/reconciletest"

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
	c := loadCluster(b, s)
	a := rt.New(b)
	a.Apply(ctx, b, c)
	sess := a.Etcd(ctx, b, c)

	b.Run("rigger", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			name := fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i)
			if _, err := etcdsnap.Save(ctx, sess, etcdsnap.SaveOptions{Name: name}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if _, err := etcdsnap.Delete(ctx, sess, name, false); err != nil {
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
