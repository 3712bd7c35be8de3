package kubenode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/internal/podstatus"
	"github.com/rigger/rigger/reconcile/observe"
)

// NoNetwork reports whether a Node's kubelet says it has no pod network:
// its Ready condition False with the container runtime's NetworkReady=false
// ("container runtime network not ready: NetworkReady=false
// reason:NetworkPluginNotReady message:docker: network plugin is not
// ready: cni config uninitialized"). The kubelet gives no reason of its own
// for it (KubeletNotReady covers every cause): its message is all there is.
func NoNetwork(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "NetworkReady=false")
		}
	}
	return false
}

// NetworkGrace is how long the network plugin's pod on a Node must have run
// ready while the Node's kubelet still says it has no network before the
// pod is recreated: the kubelet looks at the CNI configuration every few
// seconds and reports the Node's status every 10 s.
const NetworkGrace = 20 * time.Second

// networkRepair puts the network plugin on a Node again when the Node's
// kubelet has no pod network although the plugin's pod there runs and is
// ready: what the pod installs on the node when it starts (the CNI
// configuration in /etc/cni/net.d, the CNI plugin) is gone (deleted by
// hand, or by a teardown that was interrupted), and a running pod does not
// install it again. Its pod is deleted, once per Node and wait, and its
// DaemonSet creates it again, whose installer then runs.
type networkRepair struct {
	cs kubernetes.Interface
	// selector selects the network plugin's DaemonSets (the add-on's
	// label); "" when the cluster has no network plugin.
	selector string
	// nodeSubnets: the plugin gives pods addresses of their Node's pod
	// subnet (Config.NodeSubnets).
	nodeSubnets bool
	say         func(node, msg string)
	now         func() time.Time

	mu sync.Mutex
	// since is when a Node was first seen without a network while the
	// plugin's pod there was ready, by the pod's UID.
	since map[string]time.Time
	// done are the Nodes whose pod was recreated, by name.
	done map[string]bool
}

func newNetworkRepair(cs kubernetes.Interface, selector string, nodeSubnets bool, say func(node, msg string)) *networkRepair {
	if selector == "" {
		return nil
	}
	return &networkRepair{cs: cs, selector: selector, nodeSubnets: nodeSubnets, say: say, now: time.Now, since: map[string]time.Time{}, done: map[string]bool{}}
}

// check looks at Node n of the machine at address, once per poll of a
// wait: it recreates the network plugin's pod there when the Node has had
// no network for NetworkGrace while the pod was ready. Best effort: what
// cannot be read waits for the next poll.
func (r *networkRepair) check(ctx context.Context, address string, n *corev1.Node) {
	if r == nil || n == nil || !NoNetwork(n) {
		return
	}
	pods, ok := r.undone(ctx, n)
	if !ok {
		return
	}
	now := r.now()
	for _, p := range pods {
		if p.DeletionTimestamp != nil || !podstatus.Ready(&p) {
			continue
		}
		r.mu.Lock()
		first, seen := r.since[string(p.UID)]
		if !seen {
			r.since[string(p.UID)] = now
		}
		r.mu.Unlock()
		if !seen || now.Sub(first) < NetworkGrace {
			continue
		}
		if r.recreate(ctx, address, n, &p, fmt.Sprintf("Node %s has no pod network (%s) while the network plugin's pod %s/%s runs there: "+
			"the pod is recreated, so that it installs its network configuration on the node again", n.Name, readyCondition(n), p.Namespace, p.Name)) {
			return
		}
	}
}

// undone are the network plugin's pods on Node n, unless one was
// recreated for n already or they cannot be listed (false).
func (r *networkRepair) undone(ctx context.Context, n *corev1.Node) ([]corev1.Pod, bool) {
	r.mu.Lock()
	done := r.done[n.Name]
	r.mu.Unlock()
	if done {
		return nil, false
	}
	pods, err := pluginPods(ctx, r.cs, r.selector, n.Name)
	return pods, err == nil
}

// recreate deletes pod p of Node n (the one it was listed as, by its UID),
// so that its DaemonSet makes it again, records that n had its repair and
// says why; false when the delete failed (the next look tries again).
func (r *networkRepair) recreate(ctx context.Context, address string, n *corev1.Node, p *corev1.Pod, why string) bool {
	uid := p.UID
	err := r.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false
	}
	r.mu.Lock()
	r.done[n.Name] = true
	r.mu.Unlock()
	r.say(address, why)
	return true
}

// RecentNode is how long after a Node was created its network plugin's
// pods are compared with it (stale): a Node made again by a kubelet
// restarted because its Node was deleted.
const RecentNode = 10 * time.Minute

// stale recreates the network plugin's pods on Node n of the machine at
// address that were made before n (madeBefore), and deletes the pods
// stranded outside n's pod subnets (strandedPods) once the plugin's pods
// there were made for n and are ready: it waits for those up to timeout
// when pods are stranded, so that one apply leaves none (a DNS pod
// stranded on the node answers nothing until it is made again). Only a
// Node made in the last RecentNode is looked at; best effort. A plugin's
// pod is recreated once per Node, here or by check.
func (r *networkRepair) stale(ctx context.Context, address string, n *corev1.Node, timeout time.Duration) {
	if r == nil || n == nil || r.now().Sub(n.CreationTimestamp.Time) > RecentNode {
		return
	}
	// The plugin's pod may have been recreated already, while the apply
	// waited for the Node (check): the stranded pods are still there.
	pods, _ := r.undone(ctx, n)
	for _, p := range pods {
		if !madeBefore(&p, n) {
			continue
		}
		r.recreate(ctx, address, n, &p, fmt.Sprintf("the network plugin's pod %s/%s was made for an earlier Node %s (deleted, and registered again with pod subnet %s): "+
			"the pod is recreated, so that the node's pod network follows its Node", p.Namespace, p.Name, n.Name, n.Spec.PodCIDR))
	}
	if !r.nodeSubnets {
		return
	}
	if left, err := strandedOn(ctx, r.cs, n); err != nil || len(left) == 0 {
		return
	}
	plugin, err := r.pluginReady(ctx, n, timeout)
	if err != nil {
		r.say(address, fmt.Sprintf("the network plugin's pod on Node %s is not ready after %s (%s): the pods outside the Node's pod subnet %s are left; "+
			"the next rigger apply deletes them once it is", n.Name, timeout, describePods(plugin), n.Spec.PodCIDR))
		return
	}
	r.strandedPods(ctx, address, n, plugin)
}

// pluginReady waits, up to timeout, for the network plugin's pods on Node
// n to be ones made for it (none of an earlier Node, none being deleted)
// and ready, and returns them; on timeout, the error and the last listed.
func (r *networkRepair) pluginReady(ctx context.Context, n *corev1.Node, timeout time.Duration) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, ReadyPoll, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := pluginPods(ctx, r.cs, r.selector, n.Name)
		if err != nil {
			return false, nil
		}
		pods = list
		return len(list) > 0 && !slices.ContainsFunc(list, func(p corev1.Pod) bool {
			return p.DeletionTimestamp != nil || madeBefore(&p, n) || !podstatus.Ready(&p)
		}), nil
	})
	return pods, err
}

// describePods says of each pod its name and state, "no pod" for none.
func describePods(pods []corev1.Pod) string {
	if len(pods) == 0 {
		return "no pod"
	}
	var out []string
	for _, p := range pods {
		s := p.Namespace + "/" + p.Name + ": " + podstatus.State(&p)
		if p.DeletionTimestamp != nil {
			s += ", being deleted"
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// madeBefore reports whether the network plugin's pod p on Node n is one
// of an earlier Node of n's name (deleted, and registered again by its
// kubelet), which the DaemonSet keeps because the name is the same. Such a
// pod configured the node's overlay for the earlier Node's pod subnet, and
// a Node made again gets another: pods on the node cannot reach those of
// other nodes until the plugin starts again.
func madeBefore(p *corev1.Pod, n *corev1.Node) bool {
	return p.DeletionTimestamp == nil && p.CreationTimestamp.Before(&n.CreationTimestamp)
}

// StalePluginPods are, by Node name, the network plugin's pods (those of
// the DaemonSets selector selects) made for an earlier Node of the name
// (madeBefore), as "namespace/name": what an apply recreates
// (networkRepair.stale), for the plan. Only the Nodes made in the RecentNode
// before now are looked at, so an older cluster costs no call.
func StalePluginPods(ctx context.Context, cs kubernetes.Interface, selector string, nodes []corev1.Node, now time.Time) (map[string][]string, error) {
	var out map[string][]string
	for i := range nodes {
		n := &nodes[i]
		if selector == "" || now.Sub(n.CreationTimestamp.Time) > RecentNode {
			continue
		}
		pods, err := pluginPods(ctx, cs, selector, n.Name)
		if err != nil {
			return nil, fmt.Errorf("list the network plugin's pods on Node %s: %w", n.Name, err)
		}
		for _, p := range pods {
			if madeBefore(&p, n) {
				if out == nil {
					out = map[string][]string{}
				}
				out[n.Name] = append(out[n.Name], p.Namespace+"/"+p.Name)
			}
		}
	}
	return out, nil
}

// pluginPods are the pods on Node name of the DaemonSets selector selects.
func pluginPods(ctx context.Context, cs kubernetes.Interface, selector, name string) ([]corev1.Pod, error) {
	dss, err := cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, ds := range dss.Items {
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		list, err := cs.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String(), FieldSelector: "spec.nodeName=" + name})
		if err != nil {
			return nil, err
		}
		for _, p := range list.Items {
			if p.Spec.NodeName == name {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// NotWorkingError is a Node of a machine that answers which is not Ready
// after an apply's repair and wait: its kubelet runs and says why.
type NotWorkingError struct {
	Address, Node string
	// Condition is the Node's Ready condition: its status, reason and message.
	Condition string
	Waited    time.Duration
	// Pods describe the pods on the Node that are not ready.
	Pods []string
}

func (e *NotWorkingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s answers, but its Node %s is not Ready after %s (%s)", e.Address, e.Node, e.Waited.Round(time.Second), e.Condition)
	if len(e.Pods) > 0 {
		fmt.Fprintf(&b, "; on the Node: %s", strings.Join(e.Pods, "; "))
	}
	b.WriteString("; see docs/nodes.md (a Node that is not Ready)")
	return b.String()
}

// RepairNodes waits, for every Node of a machine that answered (not in
// opts.Down) that is not Ready, until it is (see repairNodes): the first
// part of Reconcile, and what an apply does before it applies the
// add-ons, whose pods would otherwise wait for such a Node.
func RepairNodes(ctx context.Context, cs kubernetes.Interface, machines []Machine, opts ReconcileOptions) error {
	say := opts.Say
	if say == nil {
		say = func(string, string) {}
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	nodes, err := ListNodes(ctx, cs)
	if err != nil {
		return err
	}
	return repairNodes(ctx, cs, machines, Link(machines, nodes), opts.Down, newNetworkRepair(cs, opts.NetworkPlugin, opts.NodeSubnets, say), opts.ReadyTimeout, say)
}

// repairNodes waits, for every Node of a machine that answered (not in
// down) that is not Ready, until it is, at most timeout, recreating the
// network plugin's pod on a Node that has no pod network (networkRepair).
// The Nodes are waited for together. An error names each Node that is
// still not Ready, with its Ready condition. A Node that is Ready already
// has the network plugin's pods of an earlier Node of its name recreated,
// and the pods stranded outside its pod subnet deleted once the new ones
// are ready (networkRepair.stale), meanwhile: its kubelet may have
// registered it again before this apply, and Ready says nothing of the
// overlay.
func repairNodes(ctx context.Context, cs kubernetes.Interface, machines []Machine, l *observe.Linkage, down []string, repair *networkRepair, timeout time.Duration, say func(node, msg string)) error {
	type waiting struct {
		m Machine
		n *corev1.Node
	}
	var ws, ready []waiting
	for _, m := range machines {
		n := l.Owned[m.Address]
		if n == nil || slices.Contains(down, m.Address) {
			continue
		}
		if observe.Ready(n) == string(corev1.ConditionTrue) {
			ready = append(ready, waiting{m, n})
			continue
		}
		say(m.Address, fmt.Sprintf("Node %s not Ready (%s): waiting for it", n.Name, readyCondition(n)))
		ws = append(ws, waiting{m, n})
	}
	var wg sync.WaitGroup
	for _, w := range ready {
		wg.Go(func() { repair.stale(ctx, w.m.Address, w.n, timeout) })
	}
	errs := make([]error, len(ws))
	for i, w := range ws {
		wg.Go(func() {
			began := time.Now()
			n, err := waitReady(ctx, cs, w.m.Address, w.m.Hostname, time.Time{}, timeout, repair)
			if err == nil {
				say(w.m.Address, fmt.Sprintf("Node %s Ready (%s)", n.Name, time.Since(began).Round(100*time.Millisecond)))
				return
			}
			if ctx.Err() != nil {
				errs[i] = err
				return
			}
			last := w.n
			if nodes, ferr := FindNodes(context.WithoutCancel(ctx), cs, w.m.Address, w.m.Hostname); ferr == nil {
				if o := Link([]Machine{w.m}, nodes).Owned[w.m.Address]; o != nil {
					last = o
				}
			}
			errs[i] = &NotWorkingError{Address: w.m.Address, Node: last.Name, Condition: readyCondition(last),
				Waited: time.Since(began), Pods: nodePods(context.WithoutCancel(ctx), cs, last.Name)}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
