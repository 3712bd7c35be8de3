package execute

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/plan"
)

// snapshot runs Options.Snapshot once, saying what (done) and what it
// guards (before). An error stops the run: nothing it guards changed.
func (r *runner) snapshot(ctx context.Context, done, before string) error {
	if r.snapshotted || r.o.Snapshot == nil {
		return nil
	}
	r.snapshotted = true
	err := r.o.Snapshot(ctx)
	r.say("etcd", done, err)
	if err != nil {
		return fmt.Errorf("snapshot before %s (nothing was changed): %w", before, err)
	}
	crashpoint.Reach(crashpoint.EtcdSnapshotTaken)
	return nil
}

// etcd runs the etcd steps (see Run).
func (r *runner) etcd(ctx context.Context, steps []plan.Step) error {
	if r.etcdNew {
		// Every member at once: the first cannot become healthy alone.
		if err := r.parallel(ctx, steps, -1, func(ctx context.Context, s plan.Step) error { return r.do(ctx, s) }); err != nil {
			return err
		}
		return r.allEtcdHealthy(ctx)
	}
	r.start(steps)
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if changesEtcd(s) {
			if err := r.snapshot(ctx, "snapshot before the change", "changing etcd"); err != nil {
				return err
			}
		}
		if err := r.snapshotLogs(ctx, s); err != nil {
			return err
		}
		if err := r.do(ctx, s); err != nil {
			return err
		}
		if s.Action == plan.AddMember && s.Member.ID != 0 && !createsEtcd(steps, s.Node) {
			// A learner an earlier apply added (the plan names its ID)
			// and started: it only needs its vote.
			if err := r.promoteStarted(ctx, s.Node); err != nil {
				return err
			}
			continue
		}
		if s.Component != desired.Etcd || s.Action == plan.Remove {
			continue
		}
		if id, ok := r.learner(s.Node); ok {
			// The new member votes once it has caught up with the leader.
			err := r.promote(ctx, s.Node, id)
			r.say(s.Node, "etcd member promoted from learner to voter", err)
			if err != nil {
				return err
			}
		}
		// A running cluster's next member changes only once this one has
		// stayed up: two members down lose a three-member quorum.
		if err := r.waitHealthy(ctx, s.Node, []string{desired.Etcd}, true); err != nil {
			return err
		}
	}
	return r.allEtcdHealthy(ctx)
}

// createsEtcd reports whether steps create node's etcd container.
func createsEtcd(steps []plan.Step, node string) bool {
	return slices.ContainsFunc(steps, func(s plan.Step) bool {
		return s.Node == node && s.Component == desired.Etcd && s.Action == plan.Create
	})
}

// promoteStarted promotes the learner of node, whose container runs
// already, once it is healthy.
func (r *runner) promoteStarted(ctx context.Context, node string) error {
	id, ok := r.learner(node)
	if !ok {
		return nil // a voter already
	}
	err := r.promote(ctx, node, id)
	r.say(node, "etcd member promoted from learner to voter", err)
	if err != nil {
		return err
	}
	return r.waitHealthy(ctx, node, []string{desired.Etcd}, true)
}

// changesEtcd reports whether a step changes a running etcd cluster's
// membership or replaces one of its members (a new version, new flags).
func changesEtcd(s plan.Step) bool {
	return s.Action == plan.AddMember || s.Action == plan.RemoveMember ||
		s.Component == desired.Etcd && s.Action == plan.Replace
}

// Membership changes the etcd cluster's members; *etcdmember.Client
// implements it. Each change goes through the members at via, the first
// first (etcdmember.Via).
type Membership interface {
	Members(ctx context.Context) ([]etcdmember.Member, error)
	AddLearner(ctx context.Context, via []string, peerURL string) (etcdmember.Member, error)
	Promote(ctx context.Context, via []string, id uint64) error
	Remove(ctx context.Context, via []string, id uint64) error
	SnapshotLogs(ctx context.Context, minor string) (etcdmember.LogSnapshots, error)
	HandOff(ctx context.Context, peerURL string) (*etcdmember.Member, error)
}

// snapshotLogs makes every member save a snapshot of its log
// (Plan.SnapshotEtcdLogs) before s, when s is the first step that moves a
// member to the minor version that needs it.
func (r *runner) snapshotLogs(ctx context.Context, s plan.Step) error {
	sl := r.etcdLogs
	if sl == nil || s.Component != desired.Etcd || s.Action != plan.Replace || !slices.Contains(sl.Nodes, s.Node) {
		return nil
	}
	r.etcdLogs = nil
	m, err := r.membership(ctx)
	if err == nil {
		var got etcdmember.LogSnapshots
		got, err = m.SnapshotLogs(ctx, sl.From)
		msg := fmt.Sprintf("every etcd %s member saved a snapshot of its log before etcd %s", sl.From, sl.To)
		if err != nil {
			msg = fmt.Sprintf("the etcd %s members' snapshots of their logs before etcd %s", sl.From, sl.To)
		}
		msg += fmt.Sprintf(" (%d written in %s; saved by %s)", got.Written, got.Took.Round(100*time.Millisecond), cmp.Or(strings.Join(got.Members, ", "), "none"))
		if len(got.Skipped) > 0 {
			msg += "; skipped " + strings.Join(got.Skipped, ", ")
		}
		r.say("etcd", msg, err)
	}
	if err != nil {
		return fmt.Errorf("before moving etcd to %s (no member was changed for it): %w", sl.To, err)
	}
	return nil
}

// leavingMembers are the peer URLs of the members steps remove.
func leavingMembers(steps []plan.Step) []string {
	var out []string
	for _, s := range steps {
		if s.Action == plan.RemoveMember && s.Member != nil {
			out = append(out, s.Member.PeerURLs...)
		}
	}
	return out
}

var _ Membership = (*etcdmember.Client)(nil)

// membership connects to etcd once per Run.
func (r *runner) membership(ctx context.Context) (Membership, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.etcdClient != nil {
		return r.etcdClient, nil
	}
	if r.o.Etcd == nil {
		return nil, errors.New("etcd membership changes need a connection to etcd, which this run has not")
	}
	m, err := r.o.Etcd(ctx)
	if err != nil {
		return nil, err
	}
	r.etcdClient = m
	return m, nil
}

// members is the run's etcd connection and the cluster's members as it
// lists them now.
func (r *runner) members(ctx context.Context) (Membership, []etcdmember.Member, error) {
	m, err := r.membership(ctx)
	if err != nil {
		return nil, nil, err
	}
	members, err := m.Members(ctx)
	if err != nil {
		return nil, nil, err
	}
	return m, members, nil
}

func (r *runner) learner(node string) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.learners[node]
	return id, ok
}

// addMember adds the step's member as a learner, unless it is a member
// already (an earlier apply added it and stopped).
func (r *runner) addMember(ctx context.Context, s plan.Step) error {
	m, members, err := r.members(ctx)
	if err != nil {
		return err
	}
	peer := s.Member.PeerURLs[0]
	added := etcdmember.Find(members, peer)
	if added == nil {
		if err := etcdmember.CheckAdd(members, etcdmember.Want{Node: s.Node, Name: s.Member.Name, PeerURL: peer}); err != nil {
			return err
		}
		mem, err := m.AddLearner(ctx, etcdmember.Via(members, 0, r.leaving), peer)
		if err != nil {
			return err
		}
		crashpoint.Reach(crashpoint.EtcdLearnerAdded)
		added = &mem
	}
	if added.IsLearner {
		r.mu.Lock()
		if r.learners == nil {
			r.learners = map[string]uint64{}
		}
		r.learners[s.Node] = added.ID
		r.mu.Unlock()
	}
	return nil
}

// removeMember removes the step's member if it is still one, and only
// while the members that stay keep their quorum.
func (r *runner) removeMember(ctx context.Context, s plan.Step) error {
	m, members, err := r.members(ctx)
	if err != nil {
		return err
	}
	target := etcdmember.Find(members, s.Member.PeerURLs[0])
	if target == nil {
		return nil // gone already
	}
	if err := etcdmember.CheckRemove(members, *target); err != nil {
		return err
	}
	return m.Remove(ctx, etcdmember.Via(members, target.ID, r.leaving), target.ID)
}

// promote makes the learner id, node's member, a voting member. It stops
// waiting for the learner to catch up when the run watches node's etcd
// container and finds it in a crash loop (a member that cannot join: its
// data directory holds another member's): the crash loop is the error,
// with etcd's last lines, not the promotion's timeout minutes later.
func (r *runner) promote(ctx context.Context, node string, id uint64) error {
	w := r.watch(node, desired.Etcd)
	if w != nil {
		w.arm()
	}
	pctx, cancel := w.untilCrash(ctx)
	defer cancel()
	m, members, err := r.members(pctx)
	if err == nil {
		err = m.Promote(pctx, etcdmember.Via(members, id, r.leaving), id)
	}
	if err != nil && w != nil && ctx.Err() == nil {
		if werr, done := w.result(); done && werr != nil {
			return werr
		}
	}
	return err
}

// joinArgs are the bootstrap flags of a member joining the running
// cluster: the started members and itself, state existing.
func (r *runner) joinArgs(ctx context.Context, s plan.Step) ([]string, error) {
	_, members, err := r.members(ctx)
	if err != nil {
		return nil, err
	}
	dn, ok := r.o.Desired.Node(s.Node)
	if !ok {
		return nil, fmt.Errorf("node %s: not in the desired cluster", s.Node)
	}
	w := etcdmember.Want{Node: s.Node, Name: desired.EtcdMemberName(dn.Hostname), PeerURL: desired.EtcdPeerURL(dn.InternalAddress)}
	return []string{
		"--initial-cluster=" + etcdmember.InitialCluster(members, w),
		"--initial-cluster-state=" + desired.InitialClusterExisting,
		"--initial-cluster-token=" + desired.EtcdClusterToken,
	}, nil
}

// allEtcdHealthy waits for every etcd member of the desired cluster on a
// node the plan could look at (the others are reported as unreachable).
func (r *runner) allEtcdHealthy(ctx context.Context) error {
	var errs []error
	for _, n := range r.o.Desired.Nodes {
		if _, ok := n.Container(desired.Etcd); !ok || r.unreachable[n.Address] {
			continue
		}
		// A new cluster's members serve nothing yet: the control plane
		// may start while they are watched.
		if err := r.waitHealthy(ctx, n.Address, []string{desired.Etcd}, !r.etcdNew); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
