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

// TestVia: membership changes go to healthy voting members, never to the
// member removed (it stops as the change applies: "server stopped"), and
// to the members the plan keeps before those it removes later.
func TestVia(t *testing.T) {
	m := func(id uint64, host string, f func(*Member)) Member {
		mem := Member{ID: id, Name: "etcd-" + host, PeerURLs: []string{"https://" + host + ":2380"},
			ClientURLs: []string{"https://" + host + ":2379", "https://127.0.0.1:2379"}, Healthy: true}
		if f != nil {
			f(&mem)
		}
		return mem
	}
	a, b, c := m(1, "a", nil), m(2, "b", nil), m(3, "c", nil)
	sick := m(4, "d", func(m *Member) { m.Healthy = false })
	learner := m(5, "e", func(m *Member) { m.IsLearner = true })
	notStarted := m(6, "f", func(m *Member) { m.Name, m.ClientURLs, m.Healthy = "", nil, false })
	peer := func(host string) string { return "https://" + host + ":2380" }
	for _, tc := range []struct {
		name    string
		members []Member
		target  uint64
		leaving []string
		want    []string
	}{
		{name: "add: every healthy voter", members: []Member{a, b, c}, want: []string{"https://a:2379", "https://b:2379", "https://c:2379"}},
		{name: "remove: not the member removed", members: []Member{a, b, c}, target: 2, leaving: []string{peer("b")},
			want: []string{"https://a:2379", "https://c:2379"}},
		{name: "add while a member leaves later: the ones that stay first", members: []Member{a, b, c}, leaving: []string{peer("a")},
			want: []string{"https://b:2379", "https://c:2379", "https://a:2379"}},
		{name: "remove the first of two leaving", members: []Member{a, b, c}, target: 1, leaving: []string{peer("a"), peer("b")},
			want: []string{"https://c:2379", "https://b:2379"}},
		{name: "every member leaves (all replaced): the others in order", members: []Member{a, b, c}, leaving: []string{peer("a"), peer("b"), peer("c")},
			want: []string{"https://a:2379", "https://b:2379", "https://c:2379"}},
		{name: "not the sick, learners or members not started", members: []Member{sick, learner, notStarted, c}, target: 0,
			want: []string{"https://c:2379"}},
		{name: "promote: not the learner", members: []Member{a, learner}, target: 5, want: []string{"https://a:2379"}},
		{name: "none", members: []Member{sick}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Via(tc.members, tc.target, tc.leaving)); diff != "" {
				t.Errorf("Via (-want +got):\n%s", diff)
			}
		})
	}
}
