package kubenode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/spec"
)

// Annotations rigger keeps on the Nodes it manages.
const (
	// AnnotationManagedLabels lists the label keys rigger set on the Node
	// (comma-separated, sorted): a key that leaves cluster.yml is removed
	// only when it is listed here, so labels others set are never touched.
	AnnotationManagedLabels = "rigger.io/managed-labels"
	// AnnotationManagedTaints lists the taints rigger set, as key:effect
	// (comma-separated, sorted), for the same reason.
	AnnotationManagedTaints = "rigger.io/managed-taints"
	// AnnotationCordoned marks a Node rigger cordoned: only such a Node is
	// uncordoned by rigger. A Node someone else cordoned stays cordoned.
	AnnotationCordoned = "rigger.io/cordoned"
)

// RKE's role labels and the taints of nodes without the worker role.
const (
	LabelRoleEtcd         = "node-role.kubernetes.io/etcd"
	LabelRoleControlPlane = "node-role.kubernetes.io/controlplane"
	LabelRoleWorker       = "node-role.kubernetes.io/worker"
)

// roleLabels are the label of each role, as RKE sets them.
var roleLabels = map[string]string{
	spec.RoleEtcd:         LabelRoleEtcd,
	spec.RoleControlPlane: LabelRoleControlPlane,
	spec.RoleWorker:       LabelRoleWorker,
}

// Wanted are the labels and taints a machine's Node must have: those of
// cluster.yml, rigger's address label, RKE's role labels
// (node-role.kubernetes.io/<role>=true) and, on a node without the worker
// role, RKE's taints that keep workloads off it:
// node-role.kubernetes.io/controlplane=true:NoSchedule for a controlplane
// node, node-role.kubernetes.io/etcd=true:NoExecute for an etcd node.
// cluster.yml's own labels and taints win over the role ones of the same
// key (and effect).
func Wanted(m Machine) (map[string]string, []corev1.Taint) {
	labels := map[string]string{desired.NodeAddressLabel: desired.NodeAddressLabelValue(m.Address)}
	var taints []corev1.Taint
	worker := slices.Contains(m.Roles, spec.RoleWorker)
	for _, r := range []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker} {
		if !slices.Contains(m.Roles, r) {
			continue
		}
		labels[roleLabels[r]] = "true"
		switch {
		case worker:
		case r == spec.RoleEtcd:
			taints = append(taints, corev1.Taint{Key: LabelRoleEtcd, Value: "true", Effect: corev1.TaintEffectNoExecute})
		case r == spec.RoleControlPlane:
			taints = append(taints, corev1.Taint{Key: LabelRoleControlPlane, Value: "true", Effect: corev1.TaintEffectNoSchedule})
		}
	}
	maps.Copy(labels, m.Labels)
	for _, t := range m.Taints {
		ct := corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)}
		taints = slices.DeleteFunc(taints, func(o corev1.Taint) bool { return taintID(o) == taintID(ct) })
		taints = append(taints, ct)
	}
	return labels, taints
}

// taintID is what tells taints apart: a Node has one taint per key and
// effect.
func taintID(t corev1.Taint) string { return t.Key + ":" + string(t.Effect) }

func taintString(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// Change is what a Node needs to carry the labels and taints it should.
type Change struct {
	// SetLabels are labels to add or whose value changes.
	SetLabels map[string]string
	// RemoveLabels are labels rigger set that cluster.yml no longer has.
	RemoveLabels []string
	// Taints is the Node's whole new taint list when it changes (nil
	// otherwise): others' taints kept, rigger's as wanted.
	Taints []corev1.Taint
	// AddTaints and RemoveTaints name the taints that change, for people.
	AddTaints, RemoveTaints []string
	// Annotations are the new values of the managed annotations, when
	// they change.
	Annotations map[string]string
}

// Empty reports whether the Node is as it should be.
func (c *Change) Empty() bool {
	return len(c.SetLabels) == 0 && len(c.RemoveLabels) == 0 && c.Taints == nil && len(c.Annotations) == 0
}

// String says what changes, for progress lines.
func (c *Change) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.SetLabels)) {
		parts = append(parts, "label "+k+"="+c.SetLabels[k])
	}
	for _, k := range c.RemoveLabels {
		parts = append(parts, "label "+k+" removed")
	}
	for _, t := range c.AddTaints {
		parts = append(parts, "taint "+t)
	}
	for _, t := range c.RemoveTaints {
		parts = append(parts, "taint "+t+" removed")
	}
	if len(parts) == 0 {
		return "bookkeeping annotations"
	}
	return strings.Join(parts, ", ")
}

// Diff computes what node needs to carry labels and taints (as Wanted
// gives them). Labels and taints that rigger did not set (the managed
// annotations do not list them) are kept, unless cluster.yml now sets the
// same key: then it becomes rigger's. It is pure.
func Diff(node *corev1.Node, labels map[string]string, taints []corev1.Taint) *Change {
	c := &Change{SetLabels: map[string]string{}, Annotations: map[string]string{}}
	for k, v := range labels {
		if have, ok := node.Labels[k]; !ok || have != v {
			c.SetLabels[k] = v
		}
	}
	for _, k := range splitList(node.Annotations[AnnotationManagedLabels]) {
		if _, want := labels[k]; !want {
			if _, ok := node.Labels[k]; ok {
				c.RemoveLabels = append(c.RemoveLabels, k)
			}
		}
	}
	if v := strings.Join(slices.Sorted(maps.Keys(labels)), ","); v != node.Annotations[AnnotationManagedLabels] {
		c.Annotations[AnnotationManagedLabels] = v
	}

	want := map[string]corev1.Taint{}
	for _, t := range taints {
		want[taintID(t)] = t
	}
	managed := splitList(node.Annotations[AnnotationManagedTaints])
	var next []corev1.Taint
	have := map[string]corev1.Taint{}
	for _, t := range node.Spec.Taints {
		id := taintID(t)
		have[id] = t
		w, wanted := want[id]
		switch {
		case wanted && w.Value == t.Value:
			next = append(next, t) // as it is, with its time added
		case wanted:
			// Replaced below.
		case slices.Contains(managed, id):
			c.RemoveTaints = append(c.RemoveTaints, taintString(t))
		default:
			next = append(next, t) // someone else's
		}
	}
	for _, t := range taints {
		if h, ok := have[taintID(t)]; !ok || h.Value != t.Value {
			next = append(next, t)
			c.AddTaints = append(c.AddTaints, taintString(t))
		}
	}
	if len(c.AddTaints) > 0 || len(c.RemoveTaints) > 0 {
		c.Taints = next
		if c.Taints == nil {
			c.Taints = []corev1.Taint{}
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if v := strings.Join(ids, ","); v != node.Annotations[AnnotationManagedTaints] {
		c.Annotations[AnnotationManagedTaints] = v
	}
	slices.Sort(c.RemoveLabels)
	slices.Sort(c.AddTaints)
	slices.Sort(c.RemoveTaints)
	return c
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Patch is the JSON merge patch that makes the change on the Node at
// resourceVersion (the API server refuses it, Conflict, when the Node
// changed since: the caller reads it again).
func (c *Change) Patch(resourceVersion string) ([]byte, error) {
	labels := map[string]any{}
	for k, v := range c.SetLabels {
		labels[k] = v
	}
	for _, k := range c.RemoveLabels {
		labels[k] = nil
	}
	meta := map[string]any{"resourceVersion": resourceVersion}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(c.Annotations) > 0 {
		meta["annotations"] = c.Annotations
	}
	patch := map[string]any{"metadata": meta}
	if c.Taints != nil {
		patch["spec"] = map[string]any{"taints": c.Taints}
	}
	return json.Marshal(patch)
}

// Sync gives the Node name the labels and taints of machine m (Wanted),
// and returns what it changed (nil when nothing). It reads the Node again
// and retries when it changed meanwhile or the API server fails for a
// passing reason.
func Sync(ctx context.Context, cs kubernetes.Interface, name string, m Machine) (*Change, error) {
	labels, taints := Wanted(m)
	var done *Change
	err := retryAPI(ctx, func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := Diff(node, labels, taints)
		if c.Empty() {
			return nil
		}
		patch, err := c.Patch(node.ResourceVersion)
		if err != nil {
			return err
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		done = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("set the labels and taints of Node %s: %w", name, err)
	}
	return done, nil
}
