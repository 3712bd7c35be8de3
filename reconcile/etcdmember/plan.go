// Package etcdmember changes the membership of a running etcd cluster
// safely: one member at a time, a new member as a learner first, only while
// the members that stay are healthy, and never below quorum. The decisions
// (Plan, CheckAdd, CheckRemove) are pure; Client carries them out with
// etcd's client through the transport.
package etcdmember

import (
	"fmt"
	"slices"
	"strings"
)

// Member is a member of the etcd cluster as etcd lists it.
type Member struct {
	ID   uint64 `json:"id"`
	Name string `json:"name,omitempty"`
	// PeerURLs identify the member; a member added but not started yet has
	// them and no name.
	PeerURLs []string `json:"peer_urls"`
	// ClientURLs are where it serves clients; none until it started.
	ClientURLs []string `json:"client_urls,omitempty"`
	IsLearner  bool     `json:"is_learner,omitempty"`
	// Healthy is set when the member answered a status request.
	Healthy bool `json:"healthy"`
	// Error says why it did not.
	Error string `json:"error,omitempty"`
	// Applied is its raft applied index when it answered: how far it has
	// caught up (not kept: it moves with every write).
	Applied uint64 `json:"-"`
}

func (m Member) String() string {
	name := m.Name
	if name == "" {
		name = "(not started)"
	}
	return fmt.Sprintf("%s %s", name, strings.Join(m.PeerURLs, ","))
}

// Want is an etcd node of cluster.yml.
type Want struct {
	// Node is the node's address.
	Node string
	// Name is the member name (desired.EtcdMemberName).
	Name string
	// PeerURL is https://<internal address>:2380.
	PeerURL string
}

// Changes are the membership changes that make members match want: the
// members to remove (those of no etcd node of cluster.yml) and the nodes to
// add. Unhealthy members to remove come first (a dead member must go before
// a new one can join), then the additions, then the healthy members to
// remove, so that the cluster grows before it shrinks.
type Changes struct {
	RemoveFirst []Member
	Add         []Want
	RemoveLast  []Member
}

// Empty reports whether nothing changes.
func (c Changes) Empty() bool {
	return len(c.RemoveFirst)+len(c.Add)+len(c.RemoveLast) == 0
}

// Plan returns the changes that turn members into want.
func Plan(members []Member, want []Want) Changes {
	var c Changes
	for _, m := range members {
		if !slices.ContainsFunc(want, func(w Want) bool { return slices.Contains(m.PeerURLs, w.PeerURL) }) {
			if m.Healthy {
				c.RemoveLast = append(c.RemoveLast, m)
			} else {
				c.RemoveFirst = append(c.RemoveFirst, m)
			}
		}
	}
	for _, w := range want {
		if Find(members, w.PeerURL) == nil {
			c.Add = append(c.Add, w)
		}
	}
	return c
}

// Find returns the member with the peer URL, or nil.
func Find(members []Member, peerURL string) *Member {
	for i := range members {
		if slices.Contains(members[i].PeerURLs, peerURL) {
			return &members[i]
		}
	}
	return nil
}

// Quorum is how many voting members a cluster of n needs to work.
func Quorum(n int) int { return n/2 + 1 }

// RefusedError is a membership change rigger will not make, and why.
type RefusedError struct {
	Change string
	Reason string
	// Do says what the operator can do.
	Do string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("etcd: will not %s: %s; %s", e.Change, e.Reason, e.Do)
}

// CheckAdd refuses to add a member unless every member is healthy: a new
// member raises the quorum, and with a sick member the cluster could lose
// it while the new one catches up.
func CheckAdd(members []Member, w Want) error {
	var sick []string
	for _, m := range members {
		if !m.Healthy {
			sick = append(sick, fmt.Sprintf("%s (%s)", m, m.Error))
		}
	}
	if len(sick) == 0 {
		return nil
	}
	return &RefusedError{
		Change: "add member " + w.Name + " on " + w.Node,
		Reason: "not every member is healthy: " + strings.Join(sick, "; "),
		Do: "bring the member back (restore its node), or remove its node from cluster.yml so that rigger removes the dead member first; " +
			"with quorum lost, restore from a snapshot",
	}
}

// CheckRemove refuses to remove m unless the members that stay keep a
// quorum of healthy voters.
func CheckRemove(members []Member, m Member) error {
	var stay, healthy int
	for _, o := range members {
		if o.ID == m.ID || o.IsLearner {
			continue
		}
		stay++
		if o.Healthy {
			healthy++
		}
	}
	if stay == 0 {
		return &RefusedError{Change: "remove member " + m.String(), Reason: "it is the last voting member",
			Do: "keep at least one etcd node in cluster.yml"}
	}
	if healthy < Quorum(stay) {
		return &RefusedError{
			Change: "remove member " + m.String(),
			Reason: fmt.Sprintf("the %d members that stay would have %d healthy, below their quorum of %d", stay, healthy, Quorum(stay)),
			Do:     "bring the sick members back first, or restore from a snapshot",
		}
	}
	return nil
}

// Warnings are what a membership ends with that works but is worth saying.
func Warnings(want []Want) []string {
	if n := len(want); n > 1 && n%2 == 0 {
		return []string{fmt.Sprintf("etcd has %d members, an even number: it tolerates no more failures than %d members; add or remove one", n, n-1)}
	}
	return nil
}

// Via returns the client URLs a membership change goes to, the first
// first: one per healthy voting member other than target (the member
// removed, 0 for none), those that stay before those whose peer URL is in
// leaving (the members the plan removes later), else in the order of
// members. A member being removed stops serving as soon as the change is
// applied, and answers "etcdserver: server stopped" to the request that
// removed it; a learner, or a member not started, cannot serve the change
// at all.
func Via(members []Member, target uint64, leaving []string) []string {
	var stay, leave []string
	for _, m := range members {
		if m.ID == target || m.IsLearner || !m.Healthy || len(m.ClientURLs) == 0 {
			continue
		}
		if slices.ContainsFunc(m.PeerURLs, func(u string) bool { return slices.Contains(leaving, u) }) {
			leave = append(leave, m.ClientURLs[0])
		} else {
			stay = append(stay, m.ClientURLs[0])
		}
	}
	return append(stay, leave...)
}

// InitialCluster is etcd's --initial-cluster for a member joining the
// running cluster: the started members with their names, and the joining
// one.
func InitialCluster(members []Member, join Want) string {
	var parts []string
	for _, m := range members {
		if m.Name == "" || len(m.PeerURLs) == 0 {
			continue // added, not started: etcd lists it without a name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, m.Name+"="+u)
		}
	}
	parts = append(parts, join.Name+"="+join.PeerURL)
	return strings.Join(parts, ",")
}
