package observe

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile/desired"
)

// node is a Node named name, labelled with address (none when ""), with
// the Ready condition ready ("" for none), created at minute created.
func node(name, address, ready string, created int) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{},
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, created, 0, 0, time.UTC))}}
	if address != "" {
		n.Labels[desired.NodeAddressLabel] = desired.NodeAddressLabelValue(address)
	}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionStatus(ready)}}
	}
	return n
}

func machines() []Machine {
	return []Machine{
		{Address: "10.0.0.1", Hostname: "n1"},
		{Address: "10.0.0.2", Hostname: "n2"},
		{Address: "fd00::3", Hostname: "n3"},
	}
}

// summary is a Linkage with Nodes by name, for comparing.
type summary struct {
	Owned      map[string]string
	Adopted    []string
	Missing    []string
	Stale      []string
	Duplicates []Duplicate
}

func summarize(l *Linkage) summary {
	s := summary{Owned: map[string]string{}, Adopted: l.Adopted, Missing: l.Missing, Duplicates: l.Duplicates}
	for a, n := range l.Owned {
		s.Owned[a] = n.Name
	}
	for _, st := range l.Stale {
		s.Stale = append(s.Stale, st.Name+": "+st.Reason)
	}
	return s
}

func TestLink(t *testing.T) {
	tests := []struct {
		name  string
		nodes []corev1.Node
		want  summary
	}{
		{
			name:  "every machine has its labelled Node, whatever its name",
			nodes: []corev1.Node{node("n1", "10.0.0.1", "True", 0), node("renamed-by-cloud", "10.0.0.2", "True", 0), node("n3", "fd00::3", "True", 0)},
			want:  summary{Owned: map[string]string{"10.0.0.1": "n1", "10.0.0.2": "renamed-by-cloud", "fd00::3": "n3"}},
		},
		{
			name:  "a deleted Node is missing",
			nodes: []corev1.Node{node("n1", "10.0.0.1", "True", 0), node("n3", "fd00::3", "True", 0)},
			want:  summary{Owned: map[string]string{"10.0.0.1": "n1", "fd00::3": "n3"}, Missing: []string{"10.0.0.2"}},
		},
		{
			name: "a Node of an address not in cluster.yml, and one without label or machine, are stale",
			nodes: []corev1.Node{node("n1", "10.0.0.1", "True", 0), node("n2", "10.0.0.2", "True", 0), node("n3", "fd00::3", "True", 0),
				node("gone", "10.0.0.9", "Unknown", 0), node("handmade", "", "", 0)},
			want: summary{Owned: map[string]string{"10.0.0.1": "n1", "10.0.0.2": "n2", "fd00::3": "n3"},
				Stale: []string{
					"gone: its address 10.0.0.9 is not in cluster.yml",
					"handmade: no rigger.io/node-address label and no node of cluster.yml has its name",
				}},
		},
		{
			name:  "an unlabelled Node named as a machine is adopted",
			nodes: []corev1.Node{node("n1", "", "True", 0), node("n2", "10.0.0.2", "True", 0)},
			want: summary{Owned: map[string]string{"10.0.0.1": "n1", "10.0.0.2": "n2"}, Adopted: []string{"10.0.0.1"},
				Missing: []string{"fd00::3"}},
		},
		{
			name:  "an unlabelled Node named as a machine that has its labelled Node is stale",
			nodes: []corev1.Node{node("n1", "", "False", 0), node("n1-new", "10.0.0.1", "True", 0)},
			want: summary{Owned: map[string]string{"10.0.0.1": "n1-new"}, Missing: []string{"10.0.0.2", "fd00::3"},
				Stale: []string{"n1: no rigger.io/node-address label, and n1-new is the Node of 10.0.0.1"}},
		},
		{
			name: "of duplicates, the one with the machine's hostname wins",
			nodes: []corev1.Node{node("old-name", "10.0.0.2", "True", 5), node("n2", "10.0.0.2", "False", 1),
				node("n1", "10.0.0.1", "True", 0), node("n3", "fd00::3", "True", 0)},
			want: summary{Owned: map[string]string{"10.0.0.1": "n1", "10.0.0.2": "n2", "fd00::3": "n3"},
				Stale:      []string{"old-name: another Node, n2, has the same address"},
				Duplicates: []Duplicate{{Address: "10.0.0.2", Owner: "n2", Others: []string{"old-name"}}}},
		},
		{
			name: "of duplicates not named as the machine, the Ready one wins, then the newest",
			nodes: []corev1.Node{node("a", "10.0.0.2", "False", 9), node("b", "10.0.0.2", "True", 1), node("c", "10.0.0.2", "True", 2),
				node("n1", "10.0.0.1", "True", 0), node("n3", "fd00::3", "True", 0)},
			want: summary{Owned: map[string]string{"10.0.0.1": "n1", "10.0.0.2": "c", "fd00::3": "n3"},
				Stale:      []string{"a: another Node, c, has the same address", "b: another Node, c, has the same address"},
				Duplicates: []Duplicate{{Address: "10.0.0.2", Owner: "c", Others: []string{"b", "a"}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarize(Link(machines(), tt.nodes))
			if diff := cmp.Diff(tt.want, got, cmpEmpty); diff != "" {
				t.Errorf("Link (-want +got):\n%s", diff)
			}
		})
	}
}

var cmpEmpty = cmp.FilterValues(func(a, b any) bool { return isEmpty(a) && isEmpty(b) }, cmp.Ignore())

func isEmpty(v any) bool {
	switch x := v.(type) {
	case []string:
		return len(x) == 0
	case []Duplicate:
		return len(x) == 0
	}
	return false
}
