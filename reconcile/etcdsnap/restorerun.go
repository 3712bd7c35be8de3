package etcdsnap

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/errdefs"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/plan"
)

// restorer is the destructive part of one restore.
type restorer struct {
	cl       *Cluster
	name     string
	stamp    string
	chk      *RestoreCheck
	members  []etcdNode
	progress func(node, msg string)

	mu  sync.Mutex
	res *RestoreResult
	// stopped are the containers stopped and removed, "node component".
	stopped []string
}

func (r *restorer) run(ctx context.Context, phase func(string), hooks plan.Hooks) error {
	fail := func(step string, err error) error {
		return r.failure(step, err)
	}
	// The controller managers and schedulers go too: without their API
	// server they exit, and Docker's back-off between their restarts grows
	// to a minute while etcd is restored; the apply starts them anew.
	phase("Stop the control plane on every controlplane node")
	if err := fanout.Each(ctx, r.chk.ControlPlane, r.cl.MaxParallel, func(ctx context.Context, _ int, node string) error {
		for _, c := range []string{desired.KubeAPIServer, desired.KubeControllerManager, desired.KubeScheduler} {
			if err := r.stop(ctx, node, c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return fail("stop the control plane", err)
	}
	phase("Stop etcd on every etcd node")
	if err := r.eachMember(ctx, func(ctx context.Context, m etcdNode) error {
		return r.stop(ctx, m.node.Address, desired.Etcd)
	}); err != nil {
		return fail("stop etcd", err)
	}
	phase("Move the etcd data directories aside")
	if err := r.eachMember(ctx, r.moveAside); err != nil {
		return fail("move the etcd data directories aside", err)
	}
	phase("Restore " + r.name + " on every etcd member")
	if err := r.eachMember(ctx, r.restore); err != nil {
		return fail("restore the snapshot", err)
	}
	phase("Apply: etcd and the control plane back")
	addonsErr, err := r.cl.Reapply(ctx, hooks)
	r.res.AddonsErr = addonsErr
	if err != nil {
		return fail("apply", err)
	}
	phase("Verify")
	if err := r.verify(ctx); err != nil {
		return fail("verify", err)
	}
	return nil
}

// eachMember runs f for every etcd node, MaxParallel at once, and joins
// the errors.
func (r *restorer) eachMember(ctx context.Context, f func(ctx context.Context, m etcdNode) error) error {
	return fanout.Each(ctx, r.members, r.cl.MaxParallel, func(ctx context.Context, _ int, m etcdNode) error { return f(ctx, m) })
}

func (r *restorer) stop(ctx context.Context, node, component string) error {
	e, err := r.cl.Engine(ctx, node)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if _, err := e.ContainerInspect(ctx, component); errdefs.IsNotFound(err) {
		r.progress(node, component+" was not there")
		return nil
	}
	if err := dockerop.Remove(ctx, e, node, component); err != nil {
		return err
	}
	r.mu.Lock()
	r.stopped = append(r.stopped, node+" "+component)
	r.mu.Unlock()
	r.progress(node, component+" stopped and removed")
	return nil
}

// moveAside renames the member's data directory member to
// member.before-restore-<time>, and removes what an earlier restore that
// stopped half-way left in the restore directory.
func (r *restorer) moveAside(ctx context.Context, m etcdNode) error {
	node := m.node.Address
	host, _, _ := etcdDataBind(m.etcd)
	e, err := r.cl.Engine(ctx, node)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	member := path.Join(host, "member")
	aside := member + asideInfix + r.stamp
	script := fmt.Sprintf(`set -e
rm -rf %[1]s
if [ -e %[2]s ]; then
  [ ! -e %[3]s ] || { echo "%[3]s exists already" >&2; exit 1; }
  mv %[2]s %[3]s
  echo moved
fi`, path.Join(host, restoreDirName), member, aside)
	out, err := dockerop.RunOutput(ctx, e, node, r.cl.HelperImage, []string{"sh", "-c", script},
		dockerop.RunOptions{Binds: []string{host + ":" + host}})
	if err != nil {
		return fmt.Errorf("move %s aside: %w", member, err)
	}
	if strings.TrimSpace(string(out)) == "moved" {
		r.mu.Lock()
		r.res.MovedAside[node] = aside
		r.mu.Unlock()
		r.progress(node, fmt.Sprintf("%s moved to %s (kept)", member, aside))
	} else {
		r.progress(node, member+" was not there: nothing to move aside")
	}
	return nil
}

// restore restores the snapshot as the node's member into the restore
// directory with etcdctl from the etcd image, then puts it in place.
func (r *restorer) restore(ctx context.Context, m etcdNode) error {
	node := m.node.Address
	host, inContainer, _ := etcdDataBind(m.etcd)
	e, err := r.cl.Engine(ctx, node)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	var me RestoreMember
	for _, rm := range r.chk.Members {
		if rm.Node == node {
			me = rm
		}
	}
	file := r.chk.Files[node]
	cmd := restoreCommand(m.etcd.Image, file, me, r.chk.Members, path.Join(inContainer, restoreDirName))
	if _, err := dockerop.RunOutput(ctx, e, node, m.etcd.Image, cmd, dockerop.RunOptions{
		Binds: []string{host + ":" + inContainer, Dir + ":" + Dir + ":ro"},
		Env:   []string{"ETCDCTL_API=3"},
	}); err != nil {
		return fmt.Errorf("%s snapshot restore: %w", cmd[0], err)
	}
	member := path.Join(host, "member")
	tmp := path.Join(host, restoreDirName)
	script := fmt.Sprintf(`set -e
[ ! -e %[2]s ] || { echo "%[2]s exists: not replaced" >&2; exit 1; }
mv %[1]s/member %[2]s
rmdir %[1]s`, tmp, member)
	if u := m.etcd.User; u != "" {
		script += "\nchown -R " + u + " " + member
	}
	if err := dockerop.Run(ctx, e, node, r.cl.HelperImage, []string{"sh", "-c", script}, []string{host + ":" + host}); err != nil {
		return fmt.Errorf("put the restored data in place: %w", err)
	}
	r.mu.Lock()
	r.res.Restored = append(r.res.Restored, node)
	r.mu.Unlock()
	r.progress(node, fmt.Sprintf("restored as member %s (%s)", me.Name, me.PeerURL))
	if file == fetchPath(r.name) {
		// The source's copy fetched here is not needed any more; the
		// node's own copy of the snapshot, if any, stays.
		if err := r.cl.removeFetched(ctx, node, r.name); err != nil {
			r.progress(node, err.Error())
		} else {
			r.progress(node, "removed the fetched copy "+file)
		}
	}
	return nil
}

// verify checks that every etcd member is healthy and a voter of one
// cluster of exactly the restored members, and that every API server is
// healthy.
func (r *restorer) verify(ctx context.Context) error {
	chk, err := r.cl.checker()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range r.members {
		t := health.Target{Node: m.node.Address, InternalAddress: m.node.InternalAddress, Component: desired.Etcd}
		if err := chk.Wait(ctx, t, restoreHealthTimeout); err != nil {
			errs = append(errs, fmt.Errorf("node %s: etcd: %w", t.Node, err))
			continue
		}
		r.progress(t.Node, "etcd healthy")
	}
	if len(errs) == 0 {
		got, err := r.cl.Members(ctx)
		if err == nil {
			err = sameMembers(got, r.chk.Members)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("etcd members: %w", err))
		} else {
			r.progress(r.members[0].node.Address, fmt.Sprintf("etcd has the %d members restored, all voters", len(got)))
		}
	}
	for _, a := range r.chk.ControlPlane {
		t := health.Target{Node: a, Component: desired.KubeAPIServer}
		if n, ok := r.cl.Desired.Node(a); ok {
			t.InternalAddress = n.InternalAddress
		}
		if err := chk.Wait(ctx, t, restoreHealthTimeout); err != nil {
			errs = append(errs, fmt.Errorf("node %s: kube-apiserver: %w", a, err))
			continue
		}
		r.progress(a, "kube-apiserver healthy")
	}
	return errors.Join(errs...)
}

// restoreHealthTimeout bounds the wait for one component in the closing
// check (the apply waited already).
const restoreHealthTimeout = 2 * time.Minute

// sameMembers checks that the etcd cluster has exactly the restored
// members, all voting.
func sameMembers(got []etcdmember.Member, want []RestoreMember) error {
	var problems []string
	for _, w := range want {
		i := slices.IndexFunc(got, func(m etcdmember.Member) bool { return m.Name == w.Name && slices.Contains(m.PeerURLs, w.PeerURL) })
		switch {
		case i < 0:
			problems = append(problems, "member "+w.Name+" ("+w.PeerURL+") is missing")
		case got[i].IsLearner:
			problems = append(problems, "member "+w.Name+" is a learner")
		}
	}
	if len(got) != len(want) {
		problems = append(problems, fmt.Sprintf("%d members, want %d", len(got), len(want)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// failure is the *RestoreError of a step that failed after the first
// container stopped.
func (r *restorer) failure(step string, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	re := &RestoreError{Name: r.name, Step: step, Err: err, Stopped: slices.Clone(r.stopped),
		MovedAside: map[string]string{}, Restored: slices.Clone(r.res.Restored), HelperImage: r.cl.HelperImage}
	for k, v := range r.res.MovedAside {
		re.MovedAside[k] = v
	}
	for _, m := range r.members {
		re.EtcdNodes = append(re.EtcdNodes, m.node.Address)
	}
	slices.Sort(re.Stopped)
	slices.Sort(re.Restored)
	return re
}

// RestoreError is a restore that failed after it began to stop
// containers: what it did, and how to go on.
type RestoreError struct {
	Name string
	// Step is what failed; Err why.
	Step string
	Err  error
	// Stopped are the containers stopped and removed, "node component".
	Stopped []string
	// MovedAside is node → where its etcd data directory was moved.
	MovedAside map[string]string
	// Restored are the etcd nodes whose data directory holds the snapshot.
	Restored []string
	// EtcdNodes are all etcd nodes, in cluster.yml order.
	EtcdNodes   []string
	HelperImage string
}

func (e *RestoreError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "restore snapshot %s: %s: %v\n", e.Name, e.Step, e.Err)
	b.WriteString("State of the cluster now:\n")
	if len(e.Stopped) > 0 {
		fmt.Fprintf(&b, "  stopped and removed: %s\n", strings.Join(e.Stopped, ", "))
	}
	for _, n := range e.EtcdNodes {
		state := "not restored"
		if slices.Contains(e.Restored, n) {
			state = "restored from " + e.Name
		}
		if a, ok := e.MovedAside[n]; ok {
			state += "; its old data is in " + a
		} else {
			state += "; its data directory was not moved"
		}
		fmt.Fprintf(&b, "  %s: %s\n", n, state)
	}
	b.WriteString("To go on, either:\n")
	fmt.Fprintf(&b, "  - run `rigger snapshot restore %s -f cluster.yml` again once the cause is fixed (the old data stays where it is), or\n", e.Name)
	if len(e.MovedAside) == 0 {
		b.WriteString("  - run `rigger apply -f cluster.yml`: nothing was moved, etcd and the API servers start again on their data.")
		return b.String()
	}
	b.WriteString("  - put the old data back on each node below (as root, with Docker), then run `rigger apply -f cluster.yml`:\n")
	for _, n := range e.EtcdNodes {
		a, ok := e.MovedAside[n]
		if !ok {
			continue
		}
		dir := path.Dir(a)
		fmt.Fprintf(&b, "      %s: docker rm -f etcd; docker run --rm -v %s:%s %s sh -c 'rm -rf %s && mv %s %s'\n",
			n, dir, dir, e.HelperImage, path.Join(dir, "member"), a, path.Join(dir, "member"))
	}
	return strings.TrimRight(b.String(), "\n")
}

func (e *RestoreError) Unwrap() error { return e.Err }
