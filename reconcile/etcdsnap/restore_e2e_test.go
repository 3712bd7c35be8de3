package etcdsnap_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// restorePhase restores snapshots (TestEtcdSandbox's second phase): a
// damaged copy is refused before anything stops, a missing copy is fetched
// from another node, and after the restore etcd holds exactly the keys of
// the snapshot, with etcd and the API servers healthy; last, a snapshot on
// no node is fetched from S3. Its keys are under /rigger-restore/, its S3
// objects in clusters/test4/restore.
func restorePhase(ctx context.Context, t *testing.T, e *etcdSandbox) {
	s, a := e.s, e.a
	c := e.cluster(t, shortAddonWait)
	sess, release := a.EtcdLocked(ctx, t, c)
	defer release()
	clis := make([]*client.Client, len(s.Nodes))
	for i, n := range s.Nodes {
		clis[i] = sandboxtest.DockerClient(t, n)
	}
	n1 := s.Nodes[0]
	etcdctl := etcdctlOn(ctx, t, c, clis[0], n1.Address)
	keys := func() []string {
		t.Helper()
		var got []string
		for _, l := range strings.Split(string(etcdctl("get", "/rigger-restore/", "--prefix", "--keys-only")), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				got = append(got, l)
			}
		}
		return got
	}
	var before []string
	for i := range 5 {
		k := fmt.Sprintf("/rigger-restore/before%d", i)
		etcdctl("put", k, "v")
		before = append(before, k)
	}
	const name = "restore-e2e"
	if _, err := etcdsnap.Save(ctx, sess, etcdsnap.SaveOptions{Name: name}); err != nil {
		t.Fatalf("save: %v", err)
	}
	for i := range 5 {
		etcdctl("put", fmt.Sprintf("/rigger-restore/after%d", i), "v")
	}
	if got := keys(); len(got) != 10 {
		t.Fatalf("keys before the restore: %v", got)
	}

	containerIDs := func() map[string]string {
		t.Helper()
		ids := map[string]string{}
		for i, cli := range clis {
			list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, ct := range list {
				// Only what rigger runs: the kubelet's pods (flannel)
				// may restart on their own on a loaded machine.
				if ct.Labels[desired.LabelComponent] == "" {
					continue
				}
				ids[s.Nodes[i].Name+" "+strings.Join(ct.Names, ",")] = ct.ID + " " + ct.State
			}
		}
		return ids
	}
	snapFile := func(n sandbox.Node) string { return filepath.Join(snapDir(n), name) }
	good, err := os.ReadFile(snapFile(s.Nodes[0]))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a damaged copy is refused before anything stops", func(t *testing.T) {
		bad := slices.Clone(good)
		bad[len(bad)/2] ^= 0xff
		if err := os.WriteFile(snapFile(s.Nodes[1]), bad, 0o600); err != nil {
			t.Fatal(err)
		}
		idsBefore := containerIDs()
		checked := false
		_, err := etcdsnap.Restore(ctx, sess, name, etcdsnap.RestoreOptions{Checked: func(*etcdsnap.RestoreCheck) error {
			checked = true
			return nil
		}})
		t.Logf("refused: %v", err)
		if err == nil || checked || !strings.Contains(err.Error(), "nothing was stopped") ||
			!strings.Contains(err.Error(), s.Nodes[1].Address) || !strings.Contains(err.Error(), "damaged") {
			t.Fatalf("restore of a damaged copy: err %v, checked %v; want it refused before the confirmation, naming node %s", err, checked, s.Nodes[1].Address)
		}
		if after := containerIDs(); !maps.Equal(idsBefore, after) {
			t.Errorf("containers changed by a refused restore:\nbefore %v\nafter  %v", idsBefore, after)
		}
		if got := keys(); len(got) != 10 {
			t.Errorf("keys after a refused restore: %v", got)
		}
		if err := os.WriteFile(snapFile(s.Nodes[1]), good, 0o600); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("restore: exactly the snapshot's keys, etcd and API servers healthy", func(t *testing.T) {
		// A copy missing on the third node is fetched from a verified one.
		for _, f := range []string{snapFile(s.Nodes[2]), snapFile(s.Nodes[2]) + ".json"} {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		var lines []string
		say := func(l string) { lines = append(lines, l) }

		// A failure half-way (the copy of the third node vanishes once
		// checked) says what was done and where the old data is.
		_, err := etcdsnap.Restore(ctx, sess, name, etcdsnap.RestoreOptions{
			Checked: func(*etcdsnap.RestoreCheck) error { return os.Remove(snapFile(s.Nodes[2])) },
		})
		var re *etcdsnap.RestoreError
		if !errors.As(err, &re) {
			t.Fatalf("restore with a copy gone after the check: %v, want a *RestoreError", err)
		}
		t.Logf("half-way failure:\n%v", err)
		first := maps.Clone(re.MovedAside)
		if re.Step != "restore the snapshot" || len(first) != 3 || slices.Contains(re.Restored, s.Nodes[2].Address) || len(re.Restored) != 2 ||
			!strings.Contains(err.Error(), s.Nodes[2].Address+": not restored; its old data is in /var/lib/etcd/member.before-restore-") ||
			!strings.Contains(err.Error(), "docker run --rm -v /var/lib/etcd:/var/lib/etcd") {
			t.Errorf("half-way failure: step %q, moved aside %v, restored %v", re.Step, re.MovedAside, re.Restored)
		}

		// Running it again finishes the restore; the first run's old data
		// keeps its place.
		res, err := etcdsnap.Restore(ctx, sess, name, etcdsnap.RestoreOptions{
			Phase:    func(title string) { say("==> " + title) },
			Progress: func(node, msg string) { say(node + ": " + msg) },
		})
		if err != nil {
			t.Fatalf("restore: %v\n%s", err, strings.Join(lines, "\n"))
		}
		t.Logf("restore:\n%s", strings.Join(lines, "\n"))
		for _, want := range []string{
			s.Nodes[0].Address + ": etcd was not there",
			s.Nodes[2].Address + ": /var/lib/etcd/member was not there: nothing to move aside",
		} {
			if !slices.Contains(lines, want) {
				t.Errorf("the second run does not say %q", want)
			}
		}
		if len(res.Check.Fetched) != 1 || res.Check.Fetched[0] != s.Nodes[2].Address || res.Check.FetchedFrom[s.Nodes[2].Address] != "node "+s.Nodes[0].Address {
			t.Errorf("fetched to %v, want the third node", res.Check.Fetched)
		}
		if len(res.Restored) != 3 {
			t.Errorf("restored on %v: want all three", res.Restored)
		}
		// The second run moved aside the members the first one restored,
		// and found none on the node where it failed.
		if _, ok := res.MovedAside[s.Nodes[2].Address]; ok || len(res.MovedAside) != 2 {
			t.Errorf("second run moved aside %v: want the first two nodes' restored members", res.MovedAside)
		}
		if got := keys(); !slices.Equal(got, before) {
			t.Errorf("keys after the restore: %v, want exactly %v", got, before)
		}
		// The old data is kept where the result says.
		for i, n := range s.Nodes {
			aside := first[n.Address]
			out, err := dockerop.RunOutput(ctx, clis[i], n.Address, c.SystemImages.Alpine, []string{"ls", aside, "/var/lib/etcd/member"},
				dockerop.RunOptions{Binds: []string{"/var/lib/etcd:/var/lib/etcd:ro"}})
			if err != nil || !strings.Contains(string(out), "snap") || !strings.Contains(string(out), "wal") {
				t.Errorf("%s: old data %s and the new member: %v %q", n.Name, aside, err, out)
			}
		}
		// No helper container is left behind.
		for i, cli := range clis {
			list, err := cli.ContainerList(ctx, container.ListOptions{All: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, ct := range list {
				if ct.Labels[dockerop.LabelHelper] != "" {
					t.Errorf("%s: helper container %v (%s) left behind", s.Nodes[i].Name, ct.Names, ct.Command)
				}
			}
		}
		// The apply after it left nothing to do.
		pl := a.Plan(ctx, t, c)
		if len(pl.Plan.Steps) != 0 {
			var b strings.Builder
			pl.Plan.Render(&b)
			t.Errorf("plan after the restore is not empty:\n%s", b.String())
		}
		// The API server works on the restored data.
		cs := a.Client(ctx, t, c)
		if _, err := cs.Discovery().ServerVersion(); err != nil {
			t.Errorf("API server after the restore: %v", err)
		}
		var st []struct {
			Status struct {
				Header struct {
					MemberID uint64 `json:"member_id"`
				}
			}
		}
		if err := json.Unmarshal(etcdctl("endpoint", "status", "--cluster", "-w", "json"), &st); err != nil || len(st) != 3 {
			t.Errorf("etcd endpoint status --cluster: %v, %d members", err, len(st))
		}
	})

	t.Run("a snapshot on no etcd node is fetched from s3", func(t *testing.T) {
		c3 := e.cluster(t, shortAddonWait, e.withS3("clusters/test4/restore", e.gw.Secret))
		release() // sess's lock: sess3 takes its own
		sess3, release3 := a.EtcdLocked(ctx, t, c3)
		defer release3()
		etcdctl("put", "/rigger-restore/s3-before", "v")
		const name = "restore-s3"
		saved, err := etcdsnap.Save(ctx, sess3, etcdsnap.SaveOptions{Name: name})
		if err != nil || saved.S3 == "" {
			t.Fatalf("save with s3: %v (s3 %q)", err, saved.S3)
		}
		etcdctl("put", "/rigger-restore/s3-after", "v")
		for _, n := range s.Nodes {
			for _, f := range []string{name, name + ".json"} {
				if err := os.Remove(filepath.Join(snapDir(n), f)); err != nil {
					t.Fatal(err)
				}
			}
		}
		res, err := etcdsnap.Restore(ctx, sess3, name, etcdsnap.RestoreOptions{})
		if err != nil {
			t.Fatalf("restore from s3: %v", err)
		}
		if len(res.Check.Fetched) != 3 || res.Check.FetchedFrom[s.Nodes[1].Address] != saved.S3 {
			t.Errorf("fetched to %v from %v, want every node from %s", res.Check.Fetched, res.Check.FetchedFrom, saved.S3)
		}
		want := append(slices.Clone(before), "/rigger-restore/s3-before")
		if got := keys(); !slices.Equal(got, want) {
			t.Errorf("keys after the restore from s3: %v, want exactly %v", got, want)
		}
	})
}
