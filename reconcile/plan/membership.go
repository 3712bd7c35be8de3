package plan

import (
	"slices"

	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/observe"
)

// CheckMembership refuses, before anything changes, the etcd membership
// changes of p that the members as observed would refuse when their turn
// comes (etcdmember.CheckAdd, CheckRemove): a member added while another
// does not answer, a removal that would leave the rest without a quorum of
// healthy voters. The changes are weighed in the plan's order, each
// against the members the changes before it leave: a dead member the plan
// removes first does not refuse the member that replaces it. The executor
// checks again, with the members as they are then. nil when no change is
// refused, or etcd's membership was not observed (a new cluster).
func CheckMembership(p *Plan, o *observe.Cluster) error {
	if o == nil || o.Etcd == nil {
		return nil
	}
	members := slices.Clone(o.Etcd.Members)
	for _, s := range p.Steps {
		if s.Member == nil || len(s.Member.PeerURLs) == 0 {
			continue
		}
		switch s.Action {
		case AddMember:
			if etcdmember.Find(members, s.Member.PeerURLs[0]) != nil {
				continue // added by an earlier apply: only its vote is left
			}
			if err := etcdmember.CheckAdd(members, etcdmember.Want{Node: s.Node, Name: s.Member.Name, PeerURL: s.Member.PeerURLs[0]}); err != nil {
				return err
			}
			members = append(members, etcdmember.Member{Name: s.Member.Name, PeerURLs: s.Member.PeerURLs, IsLearner: true, Healthy: true})
		case RemoveMember:
			m := etcdmember.Find(members, s.Member.PeerURLs[0])
			if m == nil {
				continue
			}
			if err := etcdmember.CheckRemove(members, *m); err != nil {
				return err
			}
			id := m.ID
			members = slices.DeleteFunc(members, func(m etcdmember.Member) bool { return m.ID == id })
		}
	}
	return nil
}
