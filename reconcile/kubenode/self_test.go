package kubenode

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// replicaPod is a pod of a ReplicaSet's on Node n1.
func replicaPod(namespace, name, uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID(uid),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-rs", UID: types.UID("rs-" + name), Controller: new(true)}}},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// TestFindSelf: rigger's pod is found by name and UID, with the machine
// of its Node; a pod of that name with another UID, or none, is another
// cluster's; an API error is one.
func TestFindSelf(t *testing.T) {
	ctx := context.Background()
	n1, n2 := node("n1", "10.0.0.1", "True", 0), node("n2", "10.0.0.2", "True", 0)
	link := observe.Link([]observe.Machine{{Address: "10.0.0.1", Hostname: "n1"}, {Address: "10.0.0.2", Hostname: "n2"}}, []corev1.Node{n1, n2})
	ref := observe.PodRef{Namespace: "rigger-system", Name: "rigger-1", UID: "u1"}
	cs := fake.NewClientset(replicaPod("rigger-system", "rigger-1", "u1"))
	got, err := FindSelf(ctx, cs, ref, link)
	if err != nil || got == nil || *got != (observe.Self{Pod: "rigger-system/rigger-1", Node: "n1", Address: "10.0.0.1", Controller: "rs-rigger-1"}) {
		t.Errorf("FindSelf = %+v, %v; want rigger-system/rigger-1 on n1 (10.0.0.1)", got, err)
	}
	// n1 removed from cluster.yml: its Node, stale, still names it by its
	// address label, and so does Self (the plan's removal is refused).
	removing := observe.Link([]observe.Machine{{Address: "10.0.0.2", Hostname: "n2"}}, []corev1.Node{n1, n2})
	if got, err := FindSelf(ctx, cs, ref, removing); err != nil || got == nil || got.Address != "10.0.0.1" {
		t.Errorf("on a Node of a node cluster.yml no longer declares: FindSelf = %+v, %v; want the address its label names", got, err)
	}
	if got, err := FindSelf(ctx, cs, observe.PodRef{Namespace: "rigger-system", Name: "rigger-1", UID: "other"}, link); got != nil || err != nil {
		t.Errorf("a pod of the name with another UID: FindSelf = %+v, %v; want another cluster's (nil, nil)", got, err)
	}
	if got, err := FindSelf(ctx, fake.NewClientset(), ref, link); got != nil || err != nil {
		t.Errorf("no such pod: FindSelf = %+v, %v; want nil, nil", got, err)
	}
	broken := fake.NewClientset()
	broken.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	if got, err := FindSelf(ctx, broken, ref, link); got != nil || err == nil {
		t.Errorf("the API server down: FindSelf = %+v, %v; want an error", got, err)
	}
}

// TestDrainKeepsSelf: the drain evicts the Node's pods but rigger's own,
// and says it kept it; the emptyDirs of rigger's pods (deploy/'s caches)
// do not refuse a drain without delete_local_data, those of other pods
// do.
func TestDrainKeepsSelf(t *testing.T) {
	n1 := node("n1", "10.0.0.1", "True", 0)
	withCache := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Volumes = []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		return p
	}
	self := withCache(replicaPod("rigger-system", "rigger-1", "u1"))
	sibling := withCache(replicaPod("rigger-system", "rigger-2", "u2"))
	sibling.OwnerReferences = self.OwnerReferences
	cs := fake.NewClientset(&n1, self, sibling, replicaPod("app", "web-1", "u3"))
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1"}}}}
	var evicted []string
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(interface{ GetName() string }).GetName()
		evicted = append(evicted, a.GetNamespace()+"/"+name)
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), a.GetNamespace(), name)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	found, err := FindSelf(ctx, cs, observe.PodRef{Namespace: "rigger-system", Name: "rigger-1", UID: "u1"}, nil)
	if err != nil || found == nil || found.Controller != "rs-rigger-1" {
		t.Fatalf("FindSelf = %+v, %v; want its ReplicaSet's UID", found, err)
	}
	got, err := Drain(ctx, cs, "n1", spec.NodeDrainInput{Timeout: 30}, found, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(evicted)
	if got.Evicted != 2 || got.Kept != "rigger-system/rigger-1" || strings.Join(evicted, " ") != "app/web-1 rigger-system/rigger-2" {
		t.Errorf("drained %+v, evictions %v; want app/web-1 and rigger-system/rigger-2 evicted, rigger-system/rigger-1 kept", got, evicted)
	}
	if p, err := cs.CoreV1().Pods("rigger-system").Get(ctx, "rigger-1", metav1.GetOptions{}); err != nil || len(p.Spec.Volumes) != 1 {
		t.Errorf("rigger's own pod: %v, %v", p, err)
	}
	// Another pod's emptyDir is the drain's business, as is rigger's own
	// pod when the drain is not told it is rigger's.
	other := withCache(replicaPod("app", "cache-1", "u4"))
	if _, err := cs.CoreV1().Pods("app").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = Drain(ctx, cs, "n1", spec.NodeDrainInput{Timeout: 30}, found, nil)
	if err == nil || !strings.Contains(err.Error(), "app/cache-1") || strings.Contains(err.Error(), "rigger-system/rigger-1") {
		t.Errorf("drain: %v; want a refusal for app/cache-1's local storage alone", err)
	}
	_, err = Drain(ctx, cs, "n1", spec.NodeDrainInput{Timeout: 30}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "rigger-system/rigger-1") {
		t.Errorf("drain without self: %v; want a refusal for rigger-system/rigger-1's local storage", err)
	}
}

// TestRemoveNodeEvictsOtherReplicas: the Node of a node removed from
// cluster.yml is drained of rigger's other replica (its emptyDirs are
// caches, as for every drain), and deleted.
func TestRemoveNodeEvictsOtherReplicas(t *testing.T) {
	n1 := node("n1", "10.0.0.1", "True", 0)
	sibling := replicaPod("rigger-system", "rigger-2", "u2")
	sibling.Spec.Volumes = []corev1.Volume{{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	cs := fake.NewClientset(&n1, sibling)
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1"}}}}
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(interface{ GetName() string }).GetName()
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), a.GetNamespace(), name)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// rigger runs on another node, in the ReplicaSet of rigger-2.
	self := &observe.Self{Pod: "rigger-system/rigger-1", Node: "n2", Address: "10.0.0.2", Controller: "rs-rigger-2"}
	if _, err := RemoveNode(ctx, cs, "10.0.0.1", "n1", spec.NodeDrainInput{Timeout: 30}, nil); err == nil {
		t.Fatal("the removal drained rigger-system/rigger-2's local storage without being told it is rigger's")
	}
	deleted, err := RemoveNode(ctx, cs, "10.0.0.1", "n1", spec.NodeDrainInput{Timeout: 30}, self)
	if err != nil || !slices.Equal(deleted, []string{"n1"}) {
		t.Fatalf("RemoveNode = %v, %v; want n1 drained of the other replica and deleted", deleted, err)
	}
}
