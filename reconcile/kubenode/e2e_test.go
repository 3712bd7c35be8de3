package kubenode_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// cluster is the example sandbox cluster of s with node1 (every role) and
// the workers given by index, changed by each change.
func cluster(t testing.TB, s *sandbox.Sandbox, workers []int, changes ...func(*spec.Cluster)) *spec.Cluster {
	t.Helper()
	roles := rt.Roles(1)
	for _, w := range workers {
		roles[w] = []string{spec.RoleWorker}
	}
	return rt.Cluster(t, s, roles, append([]func(*spec.Cluster){rt.NetworkOnly}, changes...)...)
}

func getNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func hasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == effect })
}

// TestNodesSandbox: the Kubernetes side of the nodes on a real cluster of
// three sandbox nodes: node1 with every role, node2 and node3 workers.
func TestNodesSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 9, Nodes: 3, Images: true})
	e := rt.New(t)
	e.AllowRemovals = true
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	n1, n2, n3 := s.Nodes[0], s.Nodes[1], s.Nodes[2]
	c := cluster(t, s, []int{1, 2})
	var cs kubernetes.Interface

	t.Run("fresh apply: every Node Ready, role labels, state Secret", func(t *testing.T) {
		e.Apply(ctx, t, c)
		cs = e.Client(ctx, t, c)
		for _, n := range s.Nodes {
			node := getNode(ctx, t, cs, n.Hostname)
			if observe.Ready(node) != "True" {
				t.Errorf("%s not Ready after apply", n.Hostname)
			}
			if node.Labels[kubenode.LabelRoleWorker] != "true" || node.Labels[desired.NodeAddressLabel] != n.Address {
				t.Errorf("%s labels %v", n.Hostname, node.Labels)
			}
			if (node.Labels[kubenode.LabelRoleEtcd] == "true") != (n.Name == n1.Name) {
				t.Errorf("%s etcd label: %v", n.Hostname, node.Labels)
			}
		}
		if !slices.ContainsFunc(e.Events(), func(l string) bool { return strings.HasPrefix(l, n2.Address+": Node "+n2.Hostname+" Ready") }) {
			t.Errorf("no Ready wait for %s in the progress", n2.Address)
		}
		set, st, err := kubenode.LoadState(ctx, cs)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Nodes) != 3 || set.Certs["kube-ca"].KeyPEM == nil {
			t.Errorf("state Secret: %d nodes, CA key %v", len(st.Nodes), set.Certs["kube-ca"].KeyPEM != nil)
		}
	})
	if cs == nil {
		t.FailNow()
	}

	t.Run("labels and taints from cluster.yml sync, others' stay", func(t *testing.T) {
		patch := []byte(`{"metadata":{"labels":{"example.com/theirs":"1"}}}`)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n2.Hostname, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		labelled := cluster(t, s, []int{1, 2}, func(c *spec.Cluster) {
			c.Nodes[1].Labels = map[string]string{"tier": "web"}
			c.Nodes[1].Taints = []spec.Taint{{Key: "dedicated", Value: "web", Effect: "NoSchedule"}}
		})
		planned := e.Plan(ctx, t, labelled)
		want := []kubenode.Pending{{Node: n2.Address, Name: n2.Hostname, Change: "label tier=web, taint dedicated=web:NoSchedule", Action: kubenode.PendingSync}}
		if !planned.Plan.Empty() || !slices.Equal(planned.NodeChanges, want) {
			t.Errorf("plan: steps %v, Node changes %+v, want %+v", rt.StepLines(planned.Plan), planned.NodeChanges, want)
		}
		e.Apply(ctx, t, labelled)
		e.InSync(ctx, t, labelled)
		node := getNode(ctx, t, cs, n2.Hostname)
		if node.Labels["tier"] != "web" || !hasTaint(node, "dedicated", corev1.TaintEffectNoSchedule) || node.Labels["example.com/theirs"] != "1" {
			t.Errorf("after adding: labels %v, taints %v", node.Labels, node.Spec.Taints)
		}
		e.Apply(ctx, t, c)
		e.InSync(ctx, t, c)
		node = getNode(ctx, t, cs, n2.Hostname)
		if _, ok := node.Labels["tier"]; ok || hasTaint(node, "dedicated", corev1.TaintEffectNoSchedule) {
			t.Errorf("after removing: labels %v, taints %v", node.Labels, node.Spec.Taints)
		}
		if node.Labels["example.com/theirs"] != "1" || node.Labels[kubenode.LabelRoleWorker] != "true" {
			t.Errorf("labels rigger does not own or still wants are gone: %v", node.Labels)
		}
	})

	t.Run("a Node deleted by hand comes back", func(t *testing.T) {
		if err := cs.CoreV1().Nodes().Delete(ctx, n3.Hostname, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		st := e.Plan(ctx, t, c).Status()
		if !slices.Equal(st.MissingNodes, []string{n3.Address}) {
			t.Errorf("status: missing Nodes %v, want %s", st.MissingNodes, n3.Address)
		}
		pl := e.Apply(ctx, t, c)
		if got := rt.StepLines(pl.Plan); !slices.Equal(got, []string{n3.Address + " restart kubelet"}) {
			t.Errorf("steps %v, want the kubelet restarted", got)
		}
		if node := getNode(ctx, t, cs, n3.Hostname); observe.Ready(node) != "True" || node.Labels[kubenode.LabelRoleWorker] != "true" {
			t.Errorf("Node back: Ready %s, labels %v", observe.Ready(node), node.Labels)
		}
		e.InSync(ctx, t, c)
	})

	t.Run("a Node of no machine is stale: reported, then deleted under stale_nodes: delete", func(t *testing.T) {
		ghost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ghost",
			Labels: map[string]string{desired.NodeAddressLabel: "10.231.9.99"}}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, ghost, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		st := e.Plan(ctx, t, c).Status()
		if len(st.StaleNodes) != 1 || st.StaleNodes[0].Name != "ghost" {
			t.Errorf("stale Nodes %+v, want ghost", st.StaleNodes)
		}
		e.Apply(ctx, t, c) // report: kept
		if _, err := cs.CoreV1().Nodes().Get(ctx, "ghost", metav1.GetOptions{}); err != nil {
			t.Errorf("stale_nodes: report deleted the stale Node: %v", err)
		}
		deleting := cluster(t, s, []int{1, 2}, func(c *spec.Cluster) { c.Rigger.StaleNodes = spec.StaleNodesDelete })
		if pl := e.Plan(ctx, t, deleting); len(pl.NodeChanges) != 1 || pl.NodeChanges[0].Name != "ghost" {
			t.Errorf("planned Node changes %+v, want ghost deleted", pl.NodeChanges)
		}
		e.Apply(ctx, t, deleting)
		e.InSync(ctx, t, deleting)
		if _, err := cs.CoreV1().Nodes().Get(ctx, "ghost", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("stale_nodes: delete kept the stale Node: %v", err)
		}
		if !slices.ContainsFunc(e.Events(), func(l string) bool { return strings.Contains(l, "deleted stale Node ghost") }) {
			t.Errorf("no progress line for the deletion")
		}
	})

	t.Run("drain: pods evicted before the kubelet changes, Node uncordoned after", func(t *testing.T) {
		uid := drainWorkload(ctx, t, cs, n2.Hostname)
		// Watch the pods and the Node while the apply runs.
		var (
			mu          sync.Mutex
			deleted     = map[types.UID]time.Time{}
			cordonedAt  time.Time
			wctx, wstop = context.WithCancel(ctx)
		)
		defer wstop()
		pw, err := cs.CoreV1().Pods("default").Watch(wctx, metav1.ListOptions{LabelSelector: "app=drain-test"})
		if err != nil {
			t.Fatal(err)
		}
		nw, err := cs.CoreV1().Nodes().Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + n2.Hostname})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for ev := range pw.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted {
					mu.Lock()
					deleted[p.UID] = time.Now()
					mu.Unlock()
				}
			}
		}()
		go func() {
			defer wg.Done()
			for ev := range nw.ResultChan() {
				if n, ok := ev.Object.(*corev1.Node); ok && n.Spec.Unschedulable {
					mu.Lock()
					if cordonedAt.IsZero() {
						cordonedAt = time.Now()
					}
					mu.Unlock()
				}
			}
		}()
		drained := cluster(t, s, []int{1, 2}, func(c *spec.Cluster) {
			c.UpgradeStrategy.Drain = new(true)
			rt.ExtraArg(rt.KubeletArgs, "v", "3")(c)
		})
		pl := e.Apply(ctx, t, drained)
		e.InSync(ctx, t, drained)
		kubeletCreated := containerCreated(ctx, t, n2, desired.Kubelet)
		wstop()
		wg.Wait()
		if !slices.Contains(rt.StepLines(pl.Plan), n2.Address+" replace kubelet") {
			t.Fatalf("steps %v", rt.StepLines(pl.Plan))
		}
		mu.Lock()
		defer mu.Unlock()
		if cordonedAt.IsZero() || cordonedAt.After(kubeletCreated) {
			t.Errorf("Node cordoned at %v, the new kubelet created at %v", cordonedAt, kubeletCreated)
		}
		for _, u := range uid {
			if at, ok := deleted[u]; !ok || at.After(kubeletCreated) {
				t.Errorf("pod %s deleted at %v (deleted: %v), the new kubelet created at %v", u, at, ok, kubeletCreated)
			}
		}
		node := getNode(ctx, t, cs, n2.Hostname)
		if node.Spec.Unschedulable || node.Annotations[kubenode.AnnotationCordoned] != "" {
			t.Errorf("Node left cordoned: %v", node.Annotations)
		}
		// Ready as the new kubelet reported it, not as the old one did.
		if hb := kubenode.Heartbeat(node); hb.Before(kubeletCreated.Truncate(time.Second)) {
			t.Errorf("the Node's last heartbeat %v is older than the new kubelet (%v)", hb, kubeletCreated)
		}
		for _, want := range []string{"cordoned Node " + n2.Hostname, "drained Node " + n2.Hostname + ": 2 pod(s) evicted", "uncordoned Node " + n2.Hostname} {
			if !slices.ContainsFunc(e.Events(), func(l string) bool { return strings.HasPrefix(l, n2.Address+": "+want) }) {
				t.Errorf("no progress line %q", want)
			}
		}
		c = drained
	})

	t.Run("a Node cordoned by someone else stays cordoned", func(t *testing.T) {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n3.Hostname, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		changed := cluster(t, s, []int{1, 2}, func(c *spec.Cluster) {
			c.UpgradeStrategy.Drain = new(true)
			rt.ExtraArg(rt.KubeletArgs, "v", "4")(c)
		})
		e.Apply(ctx, t, changed)
		if node := getNode(ctx, t, cs, n3.Hostname); !node.Spec.Unschedulable {
			t.Errorf("rigger uncordoned a Node it did not cordon")
		}
		c = changed
	})

	t.Run("an API server change cordons its node around it", func(t *testing.T) {
		changed := cluster(t, s, []int{1, 2}, func(c *spec.Cluster) {
			c.UpgradeStrategy.Drain = new(true)
			rt.ExtraArg(rt.KubeletArgs, "v", "4")(c)
			c.Services.KubeAPI.ExtraArgs = map[string]string{"v": "3"}
		})
		pl := e.Apply(ctx, t, changed)
		if got := rt.StepLines(pl.Plan); !slices.Equal(got, []string{n1.Address + " replace kube-apiserver"}) {
			t.Fatalf("steps %v", got)
		}
		var order []int
		for _, want := range []string{"cordoned Node " + n1.Hostname, "drained Node " + n1.Hostname, "replaced kube-apiserver",
			"kube-apiserver healthy", "uncordoned Node " + n1.Hostname} {
			order = append(order, slices.IndexFunc(e.Events(), func(l string) bool { return strings.HasPrefix(l, n1.Address+": "+want) }))
		}
		if !slices.IsSorted(order) || order[0] < 0 {
			t.Errorf("progress out of order (%v):\n%s", order, strings.Join(e.Events(), "\n"))
		}
		if node := getNode(ctx, t, cs, n1.Hostname); node.Spec.Unschedulable {
			t.Errorf("%s left cordoned", n1.Hostname)
		}
		e.InSync(ctx, t, changed)
		c = changed
	})

	t.Run("a worker removed from cluster.yml loses its Node first", func(t *testing.T) {
		without := cluster(t, s, []int{1}, func(cl *spec.Cluster) {
			cl.UpgradeStrategy.Drain = new(true)
			rt.ExtraArg(rt.KubeletArgs, "v", "4")(cl)
			cl.Services.KubeAPI.ExtraArgs = map[string]string{"v": "3"}
		})
		pl := e.Apply(ctx, t, without)
		if !slices.Equal(pl.Plan.RemovedNodes, []string{n3.Address}) {
			t.Fatalf("removed nodes %v", pl.Plan.RemovedNodes)
		}
		if _, err := cs.CoreV1().Nodes().Get(ctx, n3.Hostname, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the removed worker's Node: %v", err)
		}
		deletedAt := slices.IndexFunc(e.Events(), func(l string) bool { return strings.HasPrefix(l, n3.Address+": deleted Node") })
		removedAt := slices.IndexFunc(e.Events(), func(l string) bool { return strings.HasPrefix(l, n3.Address+": removed kubelet") })
		if deletedAt < 0 || removedAt < deletedAt {
			t.Errorf("Node deleted at line %d, kubelet removed at line %d", deletedAt, removedAt)
		}
	})
}

// drainWorkload runs a ReplicaSet of two pause pods pinned to the Node and
// returns their UIDs once they run.
func drainWorkload(ctx context.Context, t *testing.T, cs kubernetes.Interface, nodeName string) []types.UID {
	t.Helper()
	labels := map[string]string{"app": "drain-test"}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "drain-test", Namespace: "default"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: new(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": nodeName},
					AutomountServiceAccountToken:  new(false),
					TerminationGracePeriodSeconds: new(int64(5)),
					Containers: []corev1.Container{{Name: "pause", Image: "rigger-sandbox/pause:3.10",
						ImagePullPolicy: corev1.PullNever}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().ReplicaSets("default").Create(ctx, rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var uids []types.UID
	rt.Eventually(ctx, t, 3*time.Minute, "the drain-test pods running on "+nodeName, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=drain-test"})
		if err != nil {
			return false, err
		}
		uids = nil
		var states []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName == nodeName {
				uids = append(uids, p.UID)
			}
			states = append(states, p.Name+" "+string(p.Status.Phase)+" on "+p.Spec.NodeName)
		}
		if len(uids) != 2 {
			return false, fmt.Errorf("pods: %v", states)
		}
		return true, nil
	})
	return uids
}

// containerCreated is when the container was created on the node.
func containerCreated(ctx context.Context, t *testing.T, n sandbox.Node, name string) time.Time {
	t.Helper()
	info, err := sandboxtest.DockerClient(t, n).ContainerInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, info.Created)
	if err != nil {
		t.Fatal(err)
	}
	return at
}
