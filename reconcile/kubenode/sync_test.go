package kubenode

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/spec"
)

func taint(key, value string, effect corev1.TaintEffect) corev1.Taint {
	return corev1.Taint{Key: key, Value: value, Effect: effect}
}

func TestWanted(t *testing.T) {
	addr := map[string]string{desired.NodeAddressLabel: "10.0.0.1"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{desired.NodeAddressLabel: "10.0.0.1"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	etcdTaint := taint(LabelRoleEtcd, "true", corev1.TaintEffectNoExecute)
	cpTaint := taint(LabelRoleControlPlane, "true", corev1.TaintEffectNoSchedule)
	tests := []struct {
		name       string
		m          Machine
		wantLabels map[string]string
		wantTaints []corev1.Taint
	}{
		{"no role", Machine{Address: "10.0.0.1"}, addr, nil},
		{"every role: no taint", Machine{Address: "10.0.0.1", Roles: []string{"etcd", "controlplane", "worker"}},
			with(LabelRoleEtcd, "true", LabelRoleControlPlane, "true", LabelRoleWorker, "true"), nil},
		{"worker", Machine{Address: "10.0.0.1", Roles: []string{"worker"}}, with(LabelRoleWorker, "true"), nil},
		{"etcd only", Machine{Address: "10.0.0.1", Roles: []string{"etcd"}}, with(LabelRoleEtcd, "true"), []corev1.Taint{etcdTaint}},
		{"controlplane only", Machine{Address: "10.0.0.1", Roles: []string{"controlplane"}}, with(LabelRoleControlPlane, "true"), []corev1.Taint{cpTaint}},
		{"etcd and controlplane: both taints", Machine{Address: "10.0.0.1", Roles: []string{"controlplane", "etcd"}},
			with(LabelRoleEtcd, "true", LabelRoleControlPlane, "true"), []corev1.Taint{etcdTaint, cpTaint}},
		{"cluster.yml's labels and taints, which win over the role ones",
			Machine{Address: "10.0.0.1", Roles: []string{"controlplane"},
				Labels: map[string]string{"zone": "a", LabelRoleControlPlane: "yes"},
				Taints: []spec.Taint{{Key: "gpu", Value: "x", Effect: "NoSchedule"}, {Key: LabelRoleControlPlane, Value: "no", Effect: "NoSchedule"}}},
			with(LabelRoleControlPlane, "yes", "zone", "a"),
			[]corev1.Taint{taint("gpu", "x", corev1.TaintEffectNoSchedule), taint(LabelRoleControlPlane, "no", corev1.TaintEffectNoSchedule)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			labels, taints := Wanted(tt.m)
			if diff := cmp.Diff(tt.wantLabels, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantTaints, taints); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
		})
	}
}

// withMeta is a Node with labels, annotations and taints.
func withMeta(labels, annotations map[string]string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: labels, Annotations: annotations},
		Spec: corev1.NodeSpec{Taints: taints}}
}

func TestDiff(t *testing.T) {
	gpu := taint("gpu", "x", corev1.TaintEffectNoSchedule)
	theirs := taint("theirs", "", corev1.TaintEffectNoExecute)
	unsched := taint("node.kubernetes.io/unschedulable", "", corev1.TaintEffectNoSchedule)
	tests := []struct {
		name   string
		node   *corev1.Node
		labels map[string]string
		taints []corev1.Taint
		want   *Change
	}{
		{
			name:   "in sync",
			node:   withMeta(map[string]string{"a": "1", "other": "x"}, map[string]string{AnnotationManagedLabels: "a", AnnotationManagedTaints: "gpu:NoSchedule"}, gpu, theirs),
			labels: map[string]string{"a": "1"}, taints: []corev1.Taint{gpu},
			want: &Change{},
		},
		{
			name:   "first sync: labels and taints added, others' kept, the annotations written",
			node:   withMeta(map[string]string{"other": "x"}, nil, theirs, unsched),
			labels: map[string]string{"a": "1", "b": "2"}, taints: []corev1.Taint{gpu},
			want: &Change{SetLabels: map[string]string{"a": "1", "b": "2"},
				Taints: []corev1.Taint{theirs, unsched, gpu}, AddTaints: []string{"gpu=x:NoSchedule"},
				Annotations: map[string]string{AnnotationManagedLabels: "a,b", AnnotationManagedTaints: "gpu:NoSchedule"}},
		},
		{
			name: "removed from cluster.yml: rigger's go, others' stay",
			node: withMeta(map[string]string{"a": "1", "b": "2", "other": "x"},
				map[string]string{AnnotationManagedLabels: "a,b", AnnotationManagedTaints: "gpu:NoSchedule"}, gpu, theirs),
			labels: map[string]string{"a": "1"},
			want: &Change{RemoveLabels: []string{"b"}, Taints: []corev1.Taint{theirs}, RemoveTaints: []string{"gpu=x:NoSchedule"},
				Annotations: map[string]string{AnnotationManagedLabels: "a", AnnotationManagedTaints: ""}},
		},
		{
			name:   "a label someone removed by hand is set again, a changed value too",
			node:   withMeta(map[string]string{"b": "old"}, map[string]string{AnnotationManagedLabels: "a,b"}),
			labels: map[string]string{"a": "1", "b": "2"},
			want:   &Change{SetLabels: map[string]string{"a": "1", "b": "2"}},
		},
		{
			name:   "a label or taint others set and cluster.yml now sets becomes rigger's",
			node:   withMeta(map[string]string{"other": "x"}, nil, theirs),
			labels: map[string]string{"other": "y"}, taints: []corev1.Taint{taint("theirs", "v", corev1.TaintEffectNoExecute)},
			want: &Change{SetLabels: map[string]string{"other": "y"},
				Taints: []corev1.Taint{taint("theirs", "v", corev1.TaintEffectNoExecute)}, AddTaints: []string{"theirs=v:NoExecute"},
				Annotations: map[string]string{AnnotationManagedLabels: "other", AnnotationManagedTaints: "theirs:NoExecute"}},
		},
		{
			name:   "a managed label someone else removed is not removed again",
			node:   withMeta(map[string]string{}, map[string]string{AnnotationManagedLabels: "a,gone"}),
			labels: map[string]string{"a": "1"},
			want: &Change{SetLabels: map[string]string{"a": "1"},
				Annotations: map[string]string{AnnotationManagedLabels: "a"}},
		},
	}
	norm := func(c *Change) *Change {
		if len(c.SetLabels) == 0 {
			c.SetLabels = nil
		}
		if len(c.Annotations) == 0 {
			c.Annotations = nil
		}
		return c
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Diff(tt.node, tt.labels, tt.taints)
			if diff := cmp.Diff(norm(tt.want), norm(got)); diff != "" {
				t.Errorf("Diff (-want +got):\n%s", diff)
			}
			if tt.want.Empty() != got.Empty() {
				t.Errorf("Empty() = %v", got.Empty())
			}
		})
	}
}

// TestSync runs Sync twice against client-go's fake clientset: the second
// run changes nothing, and a label removed from cluster.yml goes.
func TestSync(t *testing.T) {
	ctx := context.Background()
	n := withMeta(map[string]string{"other": "x"}, nil, taint("theirs", "", corev1.TaintEffectNoExecute))
	cs := fake.NewClientset(n)
	m := Machine{Address: "10.0.0.1", Hostname: "n1", Roles: []string{spec.RoleControlPlane},
		Labels: map[string]string{"zone": "a"}, Taints: []spec.Taint{{Key: "gpu", Value: "x", Effect: "NoSchedule"}}}
	if c, err := Sync(ctx, cs, "n1", m); err != nil || c == nil {
		t.Fatalf("first Sync: %v, %v", c, err)
	}
	if c, err := Sync(ctx, cs, "n1", m); err != nil || c != nil {
		t.Fatalf("second Sync changed %v (err %v), want nothing", c, err)
	}
	m.Labels, m.Taints = nil, nil
	if _, err := Sync(ctx, cs, "n1", m); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{"other": "x", desired.NodeAddressLabel: "10.0.0.1", LabelRoleControlPlane: "true"}
	if diff := cmp.Diff(wantLabels, got.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantTaints := []corev1.Taint{taint("theirs", "", corev1.TaintEffectNoExecute), taint(LabelRoleControlPlane, "true", corev1.TaintEffectNoSchedule)}
	if diff := cmp.Diff(wantTaints, got.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
}

func TestCordonUncordon(t *testing.T) {
	ctx := context.Background()
	mine := withMeta(nil, nil)
	theirs := withMeta(nil, nil)
	theirs.Name, theirs.Spec.Unschedulable = "theirs", true
	cs := fake.NewClientset(mine, theirs)
	if ok, err := Cordon(ctx, cs, mine); !ok || err != nil {
		t.Fatalf("Cordon: %v %v", ok, err)
	}
	if ok, err := Cordon(ctx, cs, theirs); ok || err != nil {
		t.Fatalf("Cordon of a cordoned Node: %v %v, want false", ok, err)
	}
	for _, name := range []string{"n1", "theirs"} {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !n.Spec.Unschedulable {
			t.Errorf("%s schedulable", name)
		}
		ok, err := Uncordon(ctx, cs, n)
		if err != nil || ok != (name == "n1") {
			t.Errorf("Uncordon %s: %v %v", name, ok, err)
		}
		n, _ = cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if n.Spec.Unschedulable != (name == "theirs") || n.Annotations[AnnotationCordoned] != "" {
			t.Errorf("%s after Uncordon: unschedulable %v, annotations %v", name, n.Spec.Unschedulable, n.Annotations)
		}
	}
}
