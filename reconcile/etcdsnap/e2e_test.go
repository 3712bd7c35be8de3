package etcdsnap_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/etcdsnap/s3test"
	rt "github.com/rigger/rigger/reconcile/reconciletest"

	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// TestEtcdSandbox is one cluster's life: a real 3-member etcd on a 3-node
// sandbox, converged once, with a real S3 server (versitygw over TLS with
// a private CA) on the host's loopback. Starting a sandbox and converging
// a cluster take a minute or more each on a 2-core machine, so the
// snapshot operations, the restores and the schedule share one of each, as
// phases run in this order:
//
//   - snapshots: save, verify, list, delete, upload to S3 (snapshotPhase);
//   - restore: a damaged copy refused, a restore stopped half-way and
//     finished, a snapshot fetched from S3 (restorePhase);
//   - rke-snapshot: a snapshot without a sidecar, saved by each member as
//     RKE does and zipped as rke-tools does, restored from one node's zip;
//     a damaged file and a damaged zip refused (rkeSnapshotPhase);
//   - schedule: the schedule and retention with a fake clock, then the
//     restore request of cluster.yml (schedulePhase);
//   - snapshotter: the etcd-rolling-snapshots container on every etcd
//     node, and serve's schedule beside it (snapshotterPhase).
//
// No phase depends on what an earlier one left: each starts with the three
// members healthy and no snapshot on the nodes (startPhase), and writes
// etcd keys under a prefix, snapshots under names and S3 objects in a
// folder of its own. A phase runs alone too:
// go test -run 'TestEtcdSandbox/restore'.
func TestEtcdSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 4, Nodes: 3, Images: true})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := &etcdSandbox{s: s, a: rt.New(t), gw: s3test.Start(t)}
	e.a.Apply(ctx, t, e.cluster(t))
	for _, p := range []struct {
		name string
		run  func(context.Context, *testing.T, *etcdSandbox)
	}{
		{"snapshots", snapshotPhase},
		{"restore", restorePhase},
		{"rke-snapshot", rkeSnapshotPhase},
		{"schedule", schedulePhase},
		{"snapshotter", snapshotterPhase},
	} {
		t.Run(p.name, func(t *testing.T) {
			e.startPhase(ctx, t)
			p.run(ctx, t, e)
		})
	}
}

// etcdSandbox is what the phases of TestEtcdSandbox share: the sandbox,
// the Applier whose state directory holds the cluster's CA (which every
// snapshot's sidecar names), and the S3 server.
type etcdSandbox struct {
	s  *sandbox.Sandbox
	a  *rt.Applier
	gw *s3test.Gateway
}

// cluster is the cluster the test converged, changed by each change. The
// phases change backup_config and addon_job_timeout only, which change
// nothing on the nodes: the cluster stays converged.
func (e *etcdSandbox) cluster(t testing.TB, changes ...func(*spec.Cluster)) *spec.Cluster {
	return loadCluster(t, e.s, changes...)
}

// withS3 sets backup_config.s3backupconfig: the test's S3 server, with
// the snapshots in folder, and secret as the secret key.
func (e *etcdSandbox) withS3(folder, secret string) func(*spec.Cluster) {
	return func(c *spec.Cluster) {
		c.Services.Etcd.BackupConfig.S3BackupConfig = &spec.S3BackupConfig{
			Endpoint: e.gw.Endpoint, Region: "us-east-1", BucketName: e.gw.Bucket, Folder: folder,
			AccessKey: e.gw.Access, SecretKey: secret, CustomCA: e.gw.CAPEM,
		}
	}
}

// shortAddonWait sets addon_job_timeout for the phases that restore. A
// restore's apply waits for the add-ons to be ready, and when they are not
// it says so in its result (RestoreResult.AddonsErr) without
// failing: their pods restart by themselves once the API servers are back.
// After the API servers were down, flannel's pods can stay in crash-loop
// back-off for longer than the default 45 s (seen under CI load), which a
// restore then waits out. These phases test etcd, not the add-ons
// (reconcile's TestClusterSandbox does): a flannel that runs is seen ready
// in 10 s, one that backs off is not waited for.
func shortAddonWait(c *spec.Cluster) { c.AddonJobTimeout = 10 }

// snapDir is node n's snapshot directory, seen from the host.
func snapDir(n sandbox.Node) string { return filepath.Join(n.Dir, "opt-rke", "etcd-snapshots") }

// startPhase is where every phase starts: it waits until the three etcd
// members are healthy (an earlier phase stops one, and restores them all)
// and removes every snapshot from the nodes (the schedule counts from the
// newest one, and list lists them all) and the schedule's slot record.
func (e *etcdSandbox) startPhase(ctx context.Context, t *testing.T) {
	t.Helper()
	n1 := e.s.Nodes[0]
	etcdctl := etcdctlTry(t, e.cluster(t), sandboxtest.DockerClient(t, n1), n1.Address)
	rt.Eventually(ctx, t, 2*time.Minute, "the three etcd members healthy", func(ctx context.Context) (bool, error) {
		_, err := etcdctl(ctx, "endpoint", "health", "--cluster")
		return err == nil, err
	})
	// The schedule's slot record: an earlier phase's fake clock wrote it.
	if _, err := etcdctl(ctx, "del", etcdsnap.SlotKey(e.cluster(t).ClusterName)); err != nil {
		t.Fatal(err)
	}
	for _, n := range e.s.Nodes {
		entries, err := os.ReadDir(snapDir(n))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, de := range entries {
			if err := os.RemoveAll(filepath.Join(snapDir(n), de.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}
