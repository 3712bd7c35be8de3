package etcdmember

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func member(id uint64, name, peer string, healthy bool) Member {
	return Member{ID: id, Name: name, PeerURLs: []string{peer}, Healthy: healthy}
}

func want(node string) Want {
	return Want{Node: node, Name: "etcd-" + node, PeerURL: "https://" + node + ":2380"}
}

func TestPlan(t *testing.T) {
	a, b, c := member(1, "etcd-a", "https://a:2380", true), member(2, "etcd-b", "https://b:2380", true), member(3, "etcd-c", "https://c:2380", false)
	for _, tc := range []struct {
		name    string
		members []Member
		want    []Want
		changes Changes
	}{
		{"same", []Member{a, b}, []Want{want("a"), want("b")}, Changes{}},
		{"grow", []Member{a}, []Want{want("a"), want("b"), want("d")}, Changes{Add: []Want{want("b"), want("d")}}},
		{"replace a dead member: the dead one goes first, the healthy one last",
			[]Member{a, b, c}, []Want{want("a"), want("d")},
			Changes{RemoveFirst: []Member{c}, Add: []Want{want("d")}, RemoveLast: []Member{b}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.changes, Plan(tc.members, tc.want)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckAdd(t *testing.T) {
	healthy := []Member{member(1, "etcd-a", "https://a:2380", true), member(2, "etcd-b", "https://b:2380", true)}
	if err := CheckAdd(healthy, want("c")); err != nil {
		t.Errorf("all healthy: %v", err)
	}
	sick := append(healthy, Member{ID: 3, Name: "etcd-c", PeerURLs: []string{"https://c:2380"}, Error: "connection refused"})
	err := CheckAdd(sick, want("d"))
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "etcd-c https://c:2380 (connection refused)") || !strings.Contains(err.Error(), "remove its node from cluster.yml") {
		t.Errorf("one member down: %v", err)
	}
}

func TestCheckRemove(t *testing.T) {
	a, b, c := member(1, "etcd-a", "https://a:2380", true), member(2, "etcd-b", "https://b:2380", true), member(3, "etcd-c", "https://c:2380", true)
	down := func(m Member) Member { m.Healthy = false; m.Error = "down"; return m }
	for _, tc := range []struct {
		name    string
		members []Member
		remove  Member
		refused string
	}{
		{"3 healthy, remove one", []Member{a, b, c}, c, ""},
		{"remove the dead one of 3", []Member{a, b, down(c)}, down(c), ""},
		{"2 left, one of them dead", []Member{a, down(b), c}, c, "2 members that stay would have 1 healthy, below their quorum of 2"},
		{"the last member", []Member{a}, a, "last voting member"},
		{"a learner does not count", []Member{a, {ID: 9, PeerURLs: []string{"https://l:2380"}, IsLearner: true, Healthy: true}}, a, "last voting member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRemove(tc.members, tc.remove)
			if tc.refused == "" && err != nil || tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)) {
				t.Errorf("got %v, want refusal %q", err, tc.refused)
			}
		})
	}
}

func TestInitialCluster(t *testing.T) {
	members := []Member{
		member(1, "etcd-a", "https://a:2380", true),
		{ID: 2, PeerURLs: []string{"https://x:2380"}, IsLearner: true}, // added, not started
		member(3, "etcd-b", "https://b:2380", true),
	}
	got := InitialCluster(members, want("d"))
	if got != "etcd-a=https://a:2380,etcd-b=https://b:2380,etcd-d=https://d:2380" {
		t.Errorf("got %s", got)
	}
}

func TestWarnings(t *testing.T) {
	if w := Warnings([]Want{want("a"), want("b")}); len(w) != 1 || !strings.Contains(w[0], "even number") {
		t.Errorf("2 members: %v", w)
	}
	if w := Warnings([]Want{want("a"), want("b"), want("c")}); len(w) != 0 {
		t.Errorf("3 members: %v", w)
	}
}
