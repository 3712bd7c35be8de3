package etcdsnap_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/minio/minio-go/v7"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// snapshotPhase takes, verifies, lists, deletes and uploads snapshots
// (TestEtcdSandbox's first phase). Its keys are under /rigger-snapshots/,
// its S3 objects in clusters/test4/snapshots.
func snapshotPhase(ctx context.Context, t *testing.T, e *etcdSandbox) {
	s, gw := e.s, e.gw
	const folder = "clusters/test4/snapshots"
	open := func(c *spec.Cluster) *etcdsnap.Cluster { return e.a.Etcd(ctx, t, c) }
	c := e.cluster(t)
	sess := open(c)

	// Keys of our own, with values that can be found in the snapshot file.
	n1 := s.Nodes[0]
	cli := sandboxtest.DockerClient(t, n1)
	etcdctl := etcdctlOn(ctx, t, c, cli, n1.Address)
	var values []string
	var lastRev int64
	for i := range 8 {
		v := fmt.Sprintf("rigger-e2e-value-%d-%x", i, time.Now().UnixNano())
		values = append(values, v)
		var put struct{ Header struct{ Revision int64 } }
		if err := json.Unmarshal(etcdctl("put", fmt.Sprintf("/rigger-snapshots/key%d", i), v, "-w", "json"), &put); err != nil {
			t.Fatal(err)
		}
		lastRev = put.Header.Revision
	}
	var count struct{ Count int64 }
	if err := json.Unmarshal(etcdctl("get", "\x01", "--from-key", "--keys-only", "--limit=1", "-w", "json"), &count); err != nil {
		t.Fatal(err)
	}
	addrs := []string{s.Nodes[0].Address, s.Nodes[1].Address, s.Nodes[2].Address}
	snapFile := func(n sandbox.Node, name string) string { return filepath.Join(snapDir(n), name) }

	var first *etcdsnap.Sidecar
	t.Run("save verifies and copies to every etcd node", func(t *testing.T) {
		var lines []string
		res, err := etcdsnap.Save(ctx, sess, etcdsnap.SaveOptions{Progress: func(node, msg string) { lines = append(lines, node+": "+msg) }})
		if err != nil {
			t.Fatalf("save: %v\n%s", err, strings.Join(lines, "\n"))
		}
		sc := res.Sidecar
		first = sc
		if want := etcdsnap.Name(etcdsnap.KindManual, sc.TakenAt, false); sc.Name != want || !strings.HasPrefix(sc.Name, "rke_etcd_snapshot_") ||
			sc.Hostname != s.Nodes[0].Hostname || sc.Node != addrs[0] {
			t.Errorf("name %s, node %s (%s): want %s, taken on the first healthy member", sc.Name, sc.Node, sc.Hostname, want)
		}
		if sc.Kind != etcdsnap.KindManual || sc.EtcdVersion != strings.TrimPrefix(sandbox.EtcdVersion, "v") || sc.Revision < lastRev || sc.TotalKeys < count.Count || sc.Size <= 0 {
			t.Errorf("sidecar %+v: want a manual snapshot of etcd %s at revision ≥ %d with ≥ %d keys", sc, sandbox.EtcdVersion, lastRev, count.Count)
		}
		ca, err := os.ReadFile(filepath.Join(e.a.StateDir, "kube-ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(ca); sc.PKIFingerprint != hex.EncodeToString(sum[:]) {
			t.Errorf("pki fingerprint %s is not the sha256 of kube-ca.pem", sc.PKIFingerprint)
		}
		if len(sc.Cluster.Nodes) != 3 || sc.Cluster.KubernetesVersion != c.KubernetesVersion || !slices.Contains(sc.Cluster.Nodes[2].Roles, spec.RoleEtcd) {
			t.Errorf("cluster state %+v", sc.Cluster)
		}
		for i, cp := range res.Copies {
			if cp.Node != addrs[i] || cp.Err != nil {
				t.Errorf("copy %d: %+v", i, cp)
			}
		}
		// On every node: the same bytes, and the sidecar beside them.
		for _, n := range s.Nodes {
			b, err := os.ReadFile(snapFile(n, sc.Name))
			if err != nil {
				t.Fatalf("%s: %v", n.Name, err)
			}
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != sc.SHA256 || int64(len(b)) != sc.Size {
				t.Errorf("%s: the snapshot's sha256 or size differs from the sidecar's", n.Name)
			}
			for _, v := range values {
				if !bytes.Contains(b, []byte(v)) {
					t.Errorf("%s: the snapshot does not hold the value %s written before it", n.Name, v)
				}
			}
			side, err := os.ReadFile(snapFile(n, sc.Name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := etcdsnap.ParseSidecar(side)
			if err != nil || got.SHA256 != sc.SHA256 {
				t.Errorf("%s: sidecar %v %+v", n.Name, err, got)
			}
		}
		// etcdctl agrees on the copy of the third node.
		var st etcdsnap.Status
		out := dockerRun(ctx, t, s.Nodes[2], c.Services.Etcd.Image, "etcdctl", "snapshot", "status", "/opt/rke/etcd-snapshots/"+sc.Name, "-w", "json")
		if err := json.Unmarshal(out, &st); err != nil || st.TotalKeys != sc.TotalKeys || st.Revision != sc.Revision || st.Hash != sc.Hash {
			t.Errorf("snapshot status on node3: %v %+v, sidecar %+v", err, st, sc)
		}
	})
	if first == nil {
		t.FailNow()
	}

	t.Run("a named snapshot is never overwritten", func(t *testing.T) {
		if _, err := etcdsnap.Save(ctx, sess, etcdsnap.SaveOptions{Name: "before-upgrade"}); err != nil {
			t.Fatal(err)
		}
		_, err := etcdsnap.Save(ctx, sess, etcdsnap.SaveOptions{Name: "before-upgrade"})
		if err == nil || !strings.Contains(err.Error(), "already on") {
			t.Fatalf("second save of one name: %v", err)
		}
		if _, err := etcdsnap.Save(ctx, sess, etcdsnap.SaveOptions{Name: "../escape"}); err == nil {
			t.Fatal("a name with a path was accepted")
		}
	})

	t.Run("list", func(t *testing.T) {
		list, err := etcdsnap.List(ctx, sess, true)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, si := range list.Snapshots {
			names = append(names, si.Name)
			if !slices.Equal(si.Nodes, addrs) || si.Sidecar == nil || si.Size != si.Sidecar.Size || len(si.Damaged) > 0 || si.S3 != "" {
				t.Errorf("%+v: want on every node, with its sidecar, not in s3", si)
			}
		}
		if !slices.Equal(names, []string{first.Name, "before-upgrade"}) {
			t.Errorf("listed %v", names)
		}

		// A copy that lost its tail is damaged, not held.
		f := snapFile(s.Nodes[2], first.Name)
		if err := os.Truncate(f, first.Size-100); err != nil {
			t.Fatal(err)
		}
		list, err = etcdsnap.List(ctx, sess, false)
		if err != nil {
			t.Fatal(err)
		}
		if si := list.Snapshots[0]; !slices.Equal(si.Nodes, addrs[:2]) || !slices.Equal(si.Damaged, addrs[2:]) {
			t.Errorf("after truncating node3's copy: nodes %v, damaged %v", si.Nodes, si.Damaged)
		}

		// Snapshots RKE wrote (without a sidecar), named with and without
		// safe_timestamp, are listed at the time their names say.
		rke := []struct {
			name string
			at   time.Time
		}{
			{"2020-01-02T03:04:05Z_etcd.zip", time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)},
			{"rke_etcd_snapshot_2020-01-02T05-04-05+01-00.zip", time.Date(2020, 1, 2, 4, 4, 5, 0, time.UTC)},
		}
		for _, r := range rke {
			f := snapFile(s.Nodes[0], r.name)
			if err := os.WriteFile(f, []byte("PK"), 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(f)
		}
		list, err = etcdsnap.List(ctx, sess, false)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rke {
			if si := list.Snapshots[i]; si.Name != r.name || !si.TakenAt.Equal(r.at) || si.Sidecar != nil || !slices.Equal(si.Nodes, addrs[:1]) {
				t.Errorf("listed %+v, want %s taken at %s on %s", si, r.name, r.at, addrs[0])
			}
		}
	})

	t.Run("an unhealthy member is passed over", func(t *testing.T) {
		if err := cli.ContainerStop(ctx, desired.Etcd, container.StopOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := cli.ContainerStart(context.WithoutCancel(ctx), desired.Etcd, container.StartOptions{}); err != nil {
				t.Error(err)
			}
		}()
		res, err := etcdsnap.Save(ctx, sess, etcdsnap.SaveOptions{Name: "while-node1-is-down"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Sidecar.Node != addrs[1] {
			t.Errorf("taken on %s, want %s (node1's etcd is stopped)", res.Sidecar.Node, addrs[1])
		}
		// node1's engine answers: it gets its copy all the same.
		if _, err := os.Stat(snapFile(n1, "while-node1-is-down")); err != nil {
			t.Error(err)
		}
		if _, err := etcdsnap.Delete(ctx, sess, "while-node1-is-down", false); err != nil {
			t.Error(err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		res, err := etcdsnap.Delete(ctx, sess, "before-upgrade", false)
		if err != nil || !slices.Equal(res.Deleted, addrs) {
			t.Fatalf("delete: %v %+v", err, res)
		}
		for _, n := range s.Nodes {
			for _, f := range []string{"before-upgrade", "before-upgrade.json"} {
				if _, err := os.Stat(snapFile(n, f)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: %s still there (%v)", n.Name, f, err)
				}
			}
		}
		if _, err := etcdsnap.Delete(ctx, sess, "before-upgrade", false); err == nil || !strings.Contains(err.Error(), "no snapshot named") {
			t.Errorf("deleting it again: %v", err)
		}
		if _, err := etcdsnap.Delete(ctx, sess, "before-upgrade", true); err == nil || !strings.Contains(err.Error(), "s3backupconfig is not set") {
			t.Errorf("delete --s3 without s3backupconfig: %v", err)
		}
	})

	t.Run("upload to s3", func(t *testing.T) {
		s3sess := open(e.cluster(t, e.withS3(folder, gw.Secret)))
		res, err := etcdsnap.Save(ctx, s3sess, etcdsnap.SaveOptions{Name: "to-s3"})
		if err != nil {
			t.Fatal(err)
		}
		if want := "s3://" + gw.Bucket + "/" + folder + "/to-s3"; res.S3 != want {
			t.Errorf("uploaded to %q, want %q", res.S3, want)
		}
		obj, err := gw.Client.GetObject(ctx, gw.Bucket, folder+"/to-s3", minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(obj)
		obj.Close()
		if sum := sha256.Sum256(b); err != nil || hex.EncodeToString(sum[:]) != res.Sidecar.SHA256 {
			t.Errorf("the object in s3 is not the snapshot: %v", err)
		}
		obj, err = gw.Client.GetObject(ctx, gw.Bucket, folder+"/to-s3.json", minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		side, _ := io.ReadAll(obj)
		obj.Close()
		if sc, err := etcdsnap.ParseSidecar(side); err != nil || sc.SHA256 != res.Sidecar.SHA256 {
			t.Errorf("sidecar in s3: %v", err)
		}
		if bytes.Contains(side, []byte(gw.Secret)) || bytes.Contains(side, []byte(gw.Access)) {
			t.Error("the sidecar holds the s3 credentials")
		}

		list, err := etcdsnap.List(ctx, s3sess, true)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(list.Snapshots, func(si etcdsnap.Info) bool { return si.Name == "to-s3" })
		if i < 0 || list.Snapshots[i].S3 != res.S3 || !slices.Equal(list.Snapshots[i].Nodes, addrs) {
			t.Errorf("list: %+v", list.Snapshots)
		}

		del, err := etcdsnap.Delete(ctx, s3sess, "to-s3", true)
		if err != nil || !slices.Contains(del.Deleted, res.S3) || len(del.Deleted) != 4 {
			t.Errorf("delete --s3: %v %+v", err, del)
		}
		if _, err := gw.Client.StatObject(ctx, gw.Bucket, folder+"/to-s3", minio.StatObjectOptions{}); err == nil {
			t.Error("the object is still in s3")
		}
	})

	t.Run("a wrong s3 secret keeps the local snapshot and says so", func(t *testing.T) {
		wrong := "wrong-secret-" + hex.EncodeToString([]byte(t.Name()))[:12]
		bad := open(e.cluster(t, e.withS3(folder, wrong)))
		res, err := etcdsnap.Save(ctx, bad, etcdsnap.SaveOptions{Name: "s3-down"})
		var ue *etcdsnap.UploadError
		if !errors.As(err, &ue) || ue.Name != "s3-down" {
			t.Fatalf("save with a wrong secret: %v; want a *SnapshotUploadError", err)
		}
		var se *etcdsnap.S3Error
		if !errors.As(err, &se) || se.Temporary || (se.Code != "SignatureDoesNotMatch" && se.Code != "InvalidAccessKeyId") {
			t.Errorf("s3 error %#v: want a permanent signature error", se)
		}
		for _, secret := range []string{wrong, gw.Access} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows a credential: %v", err)
			}
		}
		if !strings.Contains(err.Error(), "kept on the etcd nodes") || res == nil || res.Sidecar == nil || res.S3 != "" {
			t.Errorf("error %v, result %+v: want the local snapshot kept and named", err, res)
		}
		for _, n := range s.Nodes {
			if _, err := os.Stat(snapFile(n, "s3-down")); err != nil {
				t.Errorf("%s: the local snapshot is gone: %v", n.Name, err)
			}
		}
	})
}

// dockerRun runs a one-shot container on a sandbox node with the snapshot
// directory and the certificates bound, and returns its output.
func dockerRun(ctx context.Context, t *testing.T, n sandbox.Node, image string, cmd ...string) []byte {
	t.Helper()
	out, err := dockerop.RunOutput(ctx, sandboxtest.DockerClient(t, n), n.Address, image, cmd, dockerop.RunOptions{
		Binds: []string{"/opt/rke/etcd-snapshots:/opt/rke/etcd-snapshots:ro"}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
