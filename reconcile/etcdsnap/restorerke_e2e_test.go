package etcdsnap_test

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// rkeSnapshotPhase restores a snapshot rigger did not take
// (TestEtcdSandbox's phase after restore): each node's etcd member saves
// one with etcdctl into /opt/rke/etcd-snapshots/<name>, no sidecar, as
// RKE's rke-etcd-backup does, so the three copies differ. The first node's
// copy, with a byte flipped, is refused before anything stops. Then the
// copies are zipped as rke-tools zips them (<name>.zip holding
// /backup/<name>, deflated, the second node's with RKE's
// /etc/kubernetes/<name>.rkestate beside it; the file removed), but for the
// third node's file, left as a user who unzipped it would: the first
// node's zip is refused in turn (what it unpacks to fails etcd's integrity
// hash), and the second node's (--from-node, restore <name>.zip) is
// unzipped by rigger and restored on every member. Every node's own zip
// and file are still there, unchanged, and nothing is unzipped beside them.
// Its keys are under /rigger-rke/.
func rkeSnapshotPhase(ctx context.Context, t *testing.T, e *etcdSandbox) {
	s, a := e.s, e.a
	c := e.cluster(t, shortAddonWait)
	sess, release := a.EtcdLocked(ctx, t, c)
	defer release()
	d, err := desired.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	clis := make([]*client.Client, len(s.Nodes))
	for i, n := range s.Nodes {
		clis[i] = sandboxtest.DockerClient(t, n)
	}
	etcdctl := etcdctlOn(ctx, t, c, clis[0], s.Nodes[0].Address)
	keys := func() []string {
		t.Helper()
		return strings.Fields(string(etcdctl("get", "/rigger-rke/", "--prefix", "--keys-only")))
	}
	var before []string
	for i := range 3 {
		k := fmt.Sprintf("/rigger-rke/before%d", i)
		etcdctl("put", k, "v")
		before = append(before, k)
	}

	// RKE's way: on each etcd node, etcdctl of the etcd image with that
	// member's ETCDCTL_* settings saves its own member's snapshot.
	const name = "before-rigger"
	copies := make([][]byte, len(s.Nodes))
	for i, n := range s.Nodes {
		etcd, ok := d.Nodes[i].Container(desired.Etcd)
		if !ok {
			t.Fatalf("%s runs no etcd", n.Name)
		}
		var env []string
		for _, v := range etcd.Env {
			if strings.HasPrefix(v, "ETCDCTL_") {
				env = append(env, v)
			}
		}
		if _, err := dockerop.RunOutput(ctx, clis[i], n.Address, etcd.Image, []string{"etcdctl", "snapshot", "save", filepath.Join(etcdsnap.Dir, name)},
			dockerop.RunOptions{Binds: []string{"/etc/kubernetes:/etc/kubernetes:ro", etcdsnap.Dir + ":" + etcdsnap.Dir}, Env: env, NetworkMode: "host"}); err != nil {
			t.Fatalf("%s: etcdctl snapshot save: %v", n.Name, err)
		}
		if copies[i], err = os.ReadFile(filepath.Join(snapDir(n), name)); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(copies[0], copies[1]) && bytes.Equal(copies[1], copies[2]) {
		t.Errorf("the three members' snapshots are the same bytes; RKE's differ from node to node, which this phase is about")
	}
	for i := range 3 {
		etcdctl("put", fmt.Sprintf("/rigger-rke/after%d", i), "v")
	}
	if got := keys(); len(got) != 6 {
		t.Fatalf("keys before the restore: %v", got)
	}

	// The first node's copy is damaged: the default source is refused.
	flipped := slices.Clone(copies[0])
	flipped[len(flipped)/3] ^= 0xff
	if err := os.WriteFile(filepath.Join(snapDir(s.Nodes[0]), name), flipped, 0o600); err != nil {
		t.Fatal(err)
	}
	copies[0] = flipped
	containerIDs := func() map[string]string {
		t.Helper()
		ids := map[string]string{}
		for i, cli := range clis {
			list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, ct := range list {
				if ct.Labels[desired.LabelComponent] != "" {
					ids[s.Nodes[i].Name+" "+strings.Join(ct.Names, ",")] = ct.ID + " " + ct.State
				}
			}
		}
		return ids
	}
	idsBefore := containerIDs()
	checked := false
	_, err = etcdsnap.Restore(ctx, sess, name, etcdsnap.RestoreOptions{Checked: func(*etcdsnap.RestoreCheck) error { checked = true; return nil }})
	t.Logf("refused: %v", err)
	if err == nil || checked || !strings.Contains(err.Error(), "nothing was stopped") ||
		!strings.Contains(err.Error(), "node "+s.Nodes[0].Address+": "+filepath.Join(etcdsnap.Dir, name)+" is damaged: etcd's integrity hash") ||
		!strings.Contains(err.Error(), "--from-node") {
		t.Fatalf("restore of a damaged copy: err %v, checked %v; want it refused before the confirmation, naming node %s, the file and --from-node",
			err, checked, s.Nodes[0].Address)
	}
	if after := containerIDs(); !maps.Equal(idsBefore, after) {
		t.Errorf("containers changed by a refused restore:\nbefore %v\nafter  %v", idsBefore, after)
	}

	// rke-tools' zips of the first two nodes' copies.
	zips := map[int][]byte{}
	for i := range 2 {
		entries := []rkeZipEntry{{"/backup/" + name, copies[i]}}
		if i == 1 {
			entries = append(entries, rkeZipEntry{"/etc/kubernetes/" + name + ".rkestate", []byte(`{"desiredState":{},"currentState":{}}`)})
		}
		zips[i] = rkeToolsZip(t, entries...)
		if err := os.WriteFile(filepath.Join(snapDir(s.Nodes[i]), name+".zip"), zips[i], 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(snapDir(s.Nodes[i]), name)); err != nil {
			t.Fatal(err)
		}
	}
	checked = false
	_, err = etcdsnap.Restore(ctx, sess, name, etcdsnap.RestoreOptions{Checked: func(*etcdsnap.RestoreCheck) error { checked = true; return nil }})
	t.Logf("refused: %v", err)
	if err == nil || checked || !strings.Contains(err.Error(), "nothing was stopped") ||
		!strings.Contains(err.Error(), "node "+s.Nodes[0].Address+": "+filepath.Join(etcdsnap.Dir, name)+".zip is damaged: what its entry \"/backup/"+name+"\" unpacks to fails etcd's integrity check") {
		t.Fatalf("restore of a damaged zip: err %v, checked %v; want it refused before the confirmation, naming node %s and the zip", err, checked, s.Nodes[0].Address)
	}
	if after := containerIDs(); !maps.Equal(idsBefore, after) {
		t.Errorf("containers changed by a refused restore:\nbefore %v\nafter  %v", idsBefore, after)
	}

	// The second node's zip, unzipped by rigger and restored on every
	// member, asked for by its file's name.
	// rigger unzips into $TMPDIR: a directory of this test's own.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var lines []string
	res, err := etcdsnap.Restore(ctx, sess, name+".zip", etcdsnap.RestoreOptions{
		FromNode: s.Nodes[1].Address,
		Phase:    func(title string) { lines = append(lines, "==> "+title) },
		Progress: func(node, msg string) { lines = append(lines, node+": "+msg) },
	})
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, strings.Join(lines, "\n"))
	}
	t.Logf("restore:\n%s", strings.Join(lines, "\n"))
	chk := res.Check
	if chk.Name != name || chk.Sidecar != nil || chk.Source != s.Nodes[1].Address || len(chk.Fetched) != 3 || len(res.Restored) != 3 ||
		chk.Files[s.Nodes[0].Address] != filepath.Join(etcdsnap.FetchDir, name) || chk.Files[s.Nodes[1].Address] != filepath.Join(etcdsnap.FetchDir, name) ||
		chk.SHA256 != fmt.Sprintf("%x", sha256.Sum256(copies[1])) {
		t.Errorf("check: name %q, source %q, sha256 %s, fetched to %v, files %v; restored on %v", chk.Name, chk.Source, chk.SHA256, chk.Fetched, chk.Files, res.Restored)
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
		t.Errorf("the restore left files in $TMPDIR: %v (%v)", left, err)
	}
	if got := keys(); !slices.Equal(got, before) {
		t.Errorf("keys after the restore: %v, want exactly the snapshot's %v", got, before)
	}
	if _, err := a.Client(ctx, t, c).Discovery().ServerVersion(); err != nil {
		t.Errorf("API server after the restore: %v", err)
	}
	// Every node's own zip or file is there, unchanged (the first one's
	// damaged as it was left), nothing was unzipped beside a zip, no
	// sidecar was made, and the fetched copies are gone.
	for i, n := range s.Nodes {
		own, want := name, copies[i]
		if z, ok := zips[i]; ok {
			own, want = name+".zip", z
			if _, err := os.Stat(filepath.Join(snapDir(n), name)); !os.IsNotExist(err) {
				t.Errorf("%s: %s was unzipped beside its zip (%v)", n.Name, name, err)
			}
		}
		got, err := os.ReadFile(filepath.Join(snapDir(n), own))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: its own %s changed or gone (%v)", n.Name, own, err)
		}
		if _, err := os.Stat(filepath.Join(snapDir(n), name+".json")); !os.IsNotExist(err) {
			t.Errorf("%s: a sidecar was made for %s (%v)", n.Name, name, err)
		}
		if _, err := os.Stat(filepath.Join(snapDir(n), ".rigger-restore", name)); !os.IsNotExist(err) {
			t.Errorf("%s: the fetched copy is left behind (%v)", n.Name, err)
		}
	}
}

// rkeZipEntry is one file of a zip rkeToolsZip makes.
type rkeZipEntry struct {
	name string
	data []byte
}

// rkeToolsZip zips the entries as rke-tools' compressFiles does: each
// under its full path, deflated, its time the Unix epoch.
func rkeToolsZip(t *testing.T, entries ...rkeZipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: time.Unix(0, 0)})
		if err == nil {
			_, err = w.Write(e.data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
