package gitops_test

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/gitops"
	"github.com/rigger/rigger/reconcile"
	"github.com/rigger/rigger/spec"
)

// TestServerChangeBeforeDriftChecks: with the one reconcile slot held and
// the other clusters' routine reconciles waiting for it, a push that
// changes a waiting cluster's cluster.yml and adds a new one: both take
// the slot before the routine reconciles that waited longer. The status
// commits serve made are its own (OwnCommit); a person's commit is not.
func TestServerChangeBeforeDriftChecks(t *testing.T) {
	o := newOrigin(t, freePort(t)) // nothing listens: the test triggers the fetches
	names := []string{"a", "b", "c", "d", "e"}
	files := map[string]string{}
	for _, n := range names {
		files["clusters/"+n+"/cluster.yml"] = clusterYML(n, "")
	}
	o.commit(t, "five clusters", files)
	// Each applied already, as a status.yml of an earlier serve says: its
	// first reconcile is routine, not a change.
	status := map[string]string{}
	for _, n := range names {
		status["clusters/"+n+"/status.yml"] = fmt.Sprintf("apiVersion: rigger.io/v1\nkind: ClusterStatus\ncluster: %s\n"+
			"source: {repository: x, branch: main, path: clusters/%s/cluster.yml, blob: %s}\nobservedRevision: %s\n",
			n, n, blobOf(t, clusterYML(n, "")), o.head(t))
	}
	o.commit(t, "their status", status)
	o.push(t)

	opened := make(chan string)
	proceed := make(chan struct{})
	stop := make(chan struct{})
	srv, events := serveClustersWith(t, o, gitops.Config{MaxConcurrent: 1,
		Open: func(c *spec.Cluster, _ reconcile.Options) (gitops.Session, error) {
			select {
			case opened <- c.ClusterName:
				select {
				case <-proceed:
				case <-stop:
				}
			case <-stop:
			}
			return nil, errors.New("no nodes in this test")
		}})
	t.Cleanup(func() { close(stop) }) // before the server's: it stops only once Open returns
	// log keeps every event; next returns the next one that matches,
	// from the log first, then as they come.
	var log []gitops.Event
	read := 0
	next := func(what string, match func(gitops.Event) bool) gitops.Event {
		t.Helper()
		for ; read < len(log); read++ {
			if match(log[read]) {
				read++
				return log[read-1]
			}
		}
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		for {
			select {
			case e := <-events:
				log = append(log, e)
				read = len(log)
				if match(e) {
					return e
				}
			case <-deadline.C:
				t.Fatalf("waited 30s for %s; events: %v", what, log)
			}
		}
	}
	recvOpened := func(what string) string {
		t.Helper()
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		for {
			select {
			case n := <-opened:
				return n
			case e := <-events:
				log = append(log, e)
			case <-deadline.C:
				t.Fatalf("waited 30s for %s; events: %v", what, log)
			}
		}
	}

	holder := recvOpened("the first reconcile to hold the slot")
	waiting := map[string]bool{}
	for len(waiting) < len(names)-1 {
		e := next("the others waiting for the slot", func(e gitops.Event) bool { return e.Kind == gitops.EventReconcileWaiting })
		if e.Trigger != "start" {
			t.Errorf("%s waits for a %q reconcile, want start", e.Path, e.Trigger)
		}
		waiting[e.Path] = true
	}
	changed := "b"
	if holder == "b" {
		changed = "c"
	}
	o.pull(t)
	o.commit(t, "a person's push", map[string]string{
		"clusters/" + changed + "/cluster.yml": clusterYML(changed, "# scaled\n"),
		"clusters/f/cluster.yml":               clusterYML("f", ""),
	})
	o.push(t)
	human := o.head(t)
	srv.Trigger()
	next("the new cluster waiting", func(e gitops.Event) bool {
		return e.Kind == gitops.EventReconcileWaiting && e.Path == "clusters/f/cluster.yml"
	})

	var order []string
	for range names {
		proceed <- struct{}{}
		order = append(order, recvOpened("the next reconcile"))
	}
	proceed <- struct{}{}
	if first := slices.Sorted(slices.Values(order[:2])); !slices.Equal(first, []string{changed, "f"}) {
		t.Errorf("after %s, the slot went to %v: want the changed %s and the new f first, then the drift checks", holder, order, changed)
	}
	read = 0
	if own := next("a status commit", func(e gitops.Event) bool { return e.Kind == gitops.EventStatusWritten }).Revision; !srv.OwnCommit(own) {
		t.Errorf("OwnCommit(%s) = false for serve's status commit", own)
	}
	if srv.OwnCommit(human) || srv.OwnCommit("") {
		t.Errorf("OwnCommit says a person's commit %s (or no commit) is serve's", human)
	}
}

// clusterYML is a valid cluster.yml of one node, with extra appended.
func clusterYML(name, extra string) string {
	return "cluster_name: " + name + "\nnodes:\n  - {address: 192.0.2.10, user: root, role: [etcd, controlplane, worker]}\n" + extra
}

// blobOf is git's blob id of content.
func blobOf(t *testing.T, content string) string {
	t.Helper()
	cmd := exec.Command("git", "hash-object", "--stdin")
	cmd.Stdin = strings.NewReader(content)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
