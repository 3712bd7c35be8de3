package etcdsnap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/rigger/rigger/internal/nodebin"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/etcdsnap/s3test"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// snapshotterPhase tests the etcd-rolling-snapshots container
// (TestEtcdSandbox's last phase), on a cluster applied with apply only:
// interval_hours 1, retention 2, S3 on a versitygw the nodes reach (on the
// sandbox's bridge). Two older scheduled snapshots are taken first by
// serve's schedule (Scheduled with a fake clock, 3 and 2 hours ago); then
// apply with services.etcd.snapshot: true runs the container on every etcd
// node, without the S3 credentials in its spec; one of them takes the due
// scheduled snapshot (verified, with its sidecar, uploaded to S3, listed
// by etcdsnap.List) and retention removes the oldest everywhere; serve's
// schedule on the same cluster then takes none. Then, with every snapshot
// and the slot record removed, the three containers (restarted) and
// serve's schedule all find a snapshot due at once: exactly one is taken.
// Last, snapshot: false removes the containers. Its S3 folder is
// "snapshotter".
func snapshotterPhase(ctx context.Context, t *testing.T, e *etcdSandbox) {
	s, a := e.s, e.a
	gw := s3test.StartAt(t, s.BridgeAddress)
	backup := func(c *spec.Cluster) {
		b := c.Services.Etcd.BackupConfig
		on := true
		b.Enabled, b.IntervalHours, b.Retention = &on, 1, 2
		b.S3BackupConfig = &spec.S3BackupConfig{Endpoint: gw.Endpoint, Region: "us-east-1", BucketName: gw.Bucket, Folder: "snapshotter",
			AccessKey: gw.Access, SecretKey: gw.Secret, CustomCA: gw.CAPEM}
	}
	// As on an RKE node: no image of rigger's (cert_downloader is RKE's
	// rke-tools), so the container runs rigger's own binary, copied in, in
	// system_images.alpine. In this test binary, that is the sandbox's.
	nodebin.Use(s.RiggerBinary)
	t.Cleanup(func() { nodebin.Use("") })
	bin, err := nodebin.Get()
	if err != nil {
		t.Fatal(err)
	}
	containers := func(on bool) func(*spec.Cluster) {
		return func(c *spec.Cluster) {
			c.Services.Etcd.Snapshot = &on
			c.SystemImages.CertDownloader = "rancher/rke-tools:v0.1.114"
		}
	}

	// Two older scheduled snapshots, by serve's schedule at -3h and -2h.
	t0 := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Second)
	clock := &fakeClock{now: t0}
	old := (&rt.Applier{StateDir: a.StateDir, Now: clock.Now}).Etcd(ctx, t, e.cluster(t, backup, containers(false)))
	var older []string
	for _, at := range []time.Duration{0, time.Hour} {
		clock.Set(t0.Add(at))
		res, err := etcdsnap.Scheduled(ctx, old)
		if err != nil || res.Snapshot == nil || res.S3Err != nil {
			t.Fatalf("older scheduled snapshot at %s: %+v, %v", t0.Add(at), res, err)
		}
		older = append(older, res.Snapshot.Sidecar.Name)
	}

	// apply only: the container on every etcd node.
	c := e.cluster(t, backup, containers(true))
	start := time.Now().UTC().Truncate(time.Second)
	a.Apply(ctx, t, c)
	clis := map[string]*client.Client{}
	for _, n := range s.Nodes {
		cli := sandboxtest.DockerClient(t, n)
		clis[n.Address] = cli
		info, err := cli.ContainerInspect(ctx, desired.EtcdRollingSnapshots)
		if err != nil {
			t.Fatalf("%s: %v", n.Name, err)
		}
		if !info.State.Running || info.Config.Image != c.SystemImages.Alpine || info.HostConfig.RestartPolicy.Name != "always" ||
			!slices.Equal(info.Config.Entrypoint, []string{desired.BinaryPath}) {
			t.Errorf("%s: %s running %v, image %s, entrypoint %v, restart %s", n.Name, desired.EtcdRollingSnapshots, info.State.Running, info.Config.Image,
				info.Config.Entrypoint, info.HostConfig.RestartPolicy.Name)
		}
		if spec := info.Config.Labels[desired.LabelSpec]; !strings.Contains(spec, `"binary":"`+bin.ID+`"`) {
			t.Errorf("%s: %s was planned without rigger's binary %s: %s", n.Name, desired.EtcdRollingSnapshots, bin.ID, spec)
		}
		// The S3 credentials are in the node's 0600 file only.
		b, _ := json.Marshal(info)
		if bytes.Contains(b, []byte(gw.Secret)) || bytes.Contains(b, []byte(gw.Access)) {
			t.Errorf("%s: docker inspect %s shows an S3 credential", n.Name, desired.EtcdRollingSnapshots)
		}
	}

	// One of the containers takes the due snapshot; retention removes the
	// oldest from every node and from S3.
	serve := a.Etcd(ctx, t, c)
	var taken etcdsnap.Info
	rt.Eventually(ctx, t, 5*time.Minute, "a scheduled snapshot by a container, in S3, and the oldest retained away", func(ctx context.Context) (bool, error) {
		l, err := etcdsnap.List(ctx, serve, true)
		if err != nil {
			return false, err
		}
		var news []etcdsnap.Info
		var names []string
		for _, si := range l.Snapshots {
			names = append(names, fmt.Sprintf("%s%v%s", si.Name, si.Nodes, si.S3))
			if si.Sidecar != nil && si.Sidecar.Kind == etcdsnap.KindScheduled && !si.TakenAt.Before(start) {
				news = append(news, si)
			}
			if si.Name == older[0] {
				return false, fmt.Errorf("%s is still there: %v", older[0], names)
			}
		}
		if len(news) > 1 {
			t.Fatalf("%d scheduled snapshots taken: %v", len(news), names)
		}
		if len(news) == 0 || news[0].S3 == "" || len(news[0].Nodes) == 0 || len(news[0].Damaged) > 0 {
			return false, fmt.Errorf("no new scheduled snapshot on a node and in s3 yet: %v", names)
		}
		taken = news[0]
		return true, nil
	})
	if !strings.HasSuffix(taken.Name, "_etcd") || taken.Sidecar.Size <= 0 || len(taken.Sidecar.SHA256) != 64 || taken.Sidecar.Cluster.ClusterName != c.ClusterName {
		t.Errorf("scheduled snapshot %+v, sidecar %+v", taken, taken.Sidecar)
	}
	n1 := s.Nodes[0]
	etcdctl := etcdctlOn(ctx, t, c, sandboxtest.DockerClient(t, n1), n1.Address)
	var rec etcdsnap.SlotRecord
	if out := etcdctl("get", etcdsnap.SlotKey(c.ClusterName), "--print-value-only"); json.Unmarshal(bytes.TrimSpace(out), &rec) != nil ||
		rec.State != etcdsnap.SlotTaken || rec.Snapshot != taken.Name || rec.Taker != desired.EtcdRollingSnapshots+" on "+taken.Sidecar.Node {
		t.Errorf("slot record %s: want taken, %s, by the container on %s", out, taken.Name, taken.Sidecar.Node)
	}
	logs := containerLogs(ctx, t, clis[taken.Sidecar.Node], time.Time{})
	for _, want := range []string{"scheduled snapshot taken and verified", "uploaded " + taken.Name, "snapshot removed by retention"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the container's log on %s lacks %q:\n%s", taken.Sidecar.Node, want, logs)
		}
	}
	for addr, cli := range clis {
		if l := containerLogs(ctx, t, cli, time.Time{}); strings.Contains(l, gw.Secret) {
			t.Errorf("the container's log on %s shows the S3 secret key", addr)
		}
	}

	// serve's schedule on the same cluster: not due, nothing taken.
	res, err := etcdsnap.Scheduled(ctx, serve)
	if err != nil || res.Snapshot != nil || res.Schedule.Due {
		t.Errorf("serve's schedule after the container's snapshot: %+v, %v; want nothing due", res, err)
	}

	// All four takers find one due at once: exactly one takes it.
	l, err := etcdsnap.List(ctx, serve, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range l.Snapshots {
		if _, err := etcdsnap.Delete(ctx, serve, si.Name, si.S3 != ""); err != nil {
			t.Fatal(err)
		}
	}
	etcdctl("del", etcdsnap.SlotKey(c.ClusterName))
	race := time.Now()
	var wg sync.WaitGroup
	for addr, cli := range clis {
		wg.Go(func() {
			if err := cli.ContainerRestart(ctx, desired.EtcdRollingSnapshots, container.StopOptions{}); err != nil {
				t.Errorf("restart the container on %s: %v", addr, err)
			}
		})
	}
	var serveRes *etcdsnap.ScheduledResult
	wg.Go(func() {
		var err error
		serveRes, err = etcdsnap.Scheduled(ctx, serve)
		if err != nil {
			t.Errorf("serve's schedule: %v", err)
		}
	})
	wg.Wait()
	ticked := map[string]bool{}
	rt.Eventually(ctx, t, 3*time.Minute, "every container's first check after its restart", func(ctx context.Context) (bool, error) {
		for addr, cli := range clis {
			l := containerLogs(ctx, t, cli, race)
			if strings.Contains(l, "scheduled snapshot failed") {
				t.Fatalf("the container on %s failed:\n%s", addr, l)
			}
			ticked[addr] = strings.Contains(l, "scheduled snapshot taken and verified") || strings.Contains(l, "scheduled snapshot not taken here") || strings.Contains(l, "no scheduled snapshot due")
			if !ticked[addr] {
				return false, fmt.Errorf("no check logged on %s yet", addr)
			}
		}
		return true, nil
	})
	l, err = etcdsnap.List(ctx, serve, true)
	if err != nil {
		t.Fatal(err)
	}
	var scheduled []string
	for _, si := range l.Snapshots {
		scheduled = append(scheduled, si.Name)
	}
	if len(scheduled) != 1 {
		t.Errorf("after four takers found a snapshot due at once: %v, want exactly one", scheduled)
	}
	t.Logf("the race's snapshot %v; serve took %v", scheduled, serveRes != nil && serveRes.Snapshot != nil)

	// snapshot: false removes the containers.
	a.Apply(ctx, t, e.cluster(t, backup, containers(false)))
	for addr, cli := range clis {
		if _, err := cli.ContainerInspect(ctx, desired.EtcdRollingSnapshots); err == nil {
			t.Errorf("%s: %s still there with snapshot: false", addr, desired.EtcdRollingSnapshots)
		}
	}
}

// containerLogs is the etcd-rolling-snapshots container's log since since
// (all of it when zero).
func containerLogs(ctx context.Context, t testing.TB, cli *client.Client, since time.Time) string {
	t.Helper()
	o := container.LogsOptions{ShowStdout: true, ShowStderr: true}
	if !since.IsZero() {
		o.Since = since.Format(time.RFC3339Nano)
	}
	rc, err := cli.ContainerLogs(ctx, desired.EtcdRollingSnapshots, o)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
