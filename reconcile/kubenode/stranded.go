package kubenode

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/internal/podstatus"
)

// stranded are those of pods on Node n whose address is outside the
// Node's pod subnets (spec.podCIDRs): a Node deleted and registered again
// gets another subnet, and a pod made before the network plugin followed
// it keeps an address of the old one, which no route on the node reaches
// any more (its API calls fail "no route to host"), and nothing makes it
// again. So is a running pod made before the Node (madeBefore) whose
// address its kubelet does not say: a kubelet restarted says it only once
// it has looked at the pod's sandbox again, which is the earlier Node's.
// Pods on the host's network, of an IP family the Node has no subnet of,
// or without an address and not running yet, are not.
func stranded(pods []corev1.Pod, n *corev1.Node) []corev1.Pod {
	var subnets []netip.Prefix
	for _, c := range append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...) {
		if p, err := netip.ParsePrefix(c); err == nil {
			subnets = append(subnets, p)
		}
	}
	var out []corev1.Pod
	for _, p := range pods {
		if p.Spec.HostNetwork || p.DeletionTimestamp != nil || p.Spec.NodeName != n.Name {
			continue
		}
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			if p.Status.Phase == corev1.PodRunning && madeBefore(&p, n) {
				out = append(out, p)
			}
			continue
		}
		family, inside := false, false
		for _, s := range subnets {
			if s.Addr().Is4() == ip.Is4() {
				family = true
				inside = inside || s.Contains(ip)
			}
		}
		if family && !inside {
			out = append(out, p)
		}
	}
	return out
}

// podAddress is pod p's address as the messages of stranded pods say it.
func podAddress(p *corev1.Pod) string {
	if p.Status.PodIP == "" {
		return "unknown, of the earlier Node's subnet (its kubelet has not said it again; the pod runs since before the Node was made)"
	}
	return p.Status.PodIP
}

// strandedOn lists the pods of Node n that stranded finds.
func strandedOn(ctx context.Context, cs kubernetes.Interface, n *corev1.Node) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil {
		return nil, err
	}
	return stranded(list.Items, n), nil
}

// StrandedPods are, by Node name, the pods outside their Node's pod
// subnets (stranded) on the Nodes made in the RecentNode before now, as
// "namespace/name (address)": what an apply makes again through their
// controllers (networkRepair.strandedPods), for the plan.
func StrandedPods(ctx context.Context, cs kubernetes.Interface, nodes []corev1.Node, now time.Time) (map[string][]string, error) {
	var out map[string][]string
	for i := range nodes {
		n := &nodes[i]
		if now.Sub(n.CreationTimestamp.Time) > RecentNode {
			continue
		}
		pods, err := strandedOn(ctx, cs, n)
		if err != nil {
			return nil, fmt.Errorf("list the pods on Node %s: %w", n.Name, err)
		}
		for _, p := range pods {
			if out == nil {
				out = map[string][]string{}
			}
			out[n.Name] = append(out[n.Name], fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, podAddress(&p)))
		}
	}
	return out, nil
}

// strandedPods deletes the stranded pods of Node n of the machine at
// address that a controller makes again, when the network plugin follows
// the Nodes' pod subnets (nodeSubnets), once the network plugin's pods
// there (plugin) were made for this Node and are ready: their new pods
// then get addresses of the Node's subnet. A pod without a controller is
// left, and said so: deleted, it would be gone. Best effort.
func (r *networkRepair) strandedPods(ctx context.Context, address string, n *corev1.Node, plugin []corev1.Pod) {
	if !r.nodeSubnets || len(plugin) == 0 {
		return
	}
	for _, p := range plugin {
		if madeBefore(&p, n) || !podstatus.Ready(&p) {
			return
		}
	}
	pods, err := strandedOn(ctx, r.cs, n)
	if err != nil {
		return
	}
	for _, p := range pods {
		if metav1.GetControllerOf(&p) == nil {
			r.say(address, fmt.Sprintf("pod %s/%s has address %s, outside Node %s's pod subnet %s (made before the node's network followed the Node made again): "+
				"it reaches nothing, and has no controller to make it again: delete it once you saved what it holds", p.Namespace, p.Name, podAddress(&p), n.Name, n.Spec.PodCIDR))
			continue
		}
		uid := p.UID
		if err := r.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err == nil {
			r.say(address, fmt.Sprintf("pod %s/%s had address %s, outside Node %s's pod subnet %s (made before the node's network followed the Node made again): "+
				"deleted, so that its controller makes it again in the Node's subnet", p.Namespace, p.Name, podAddress(&p), n.Name, n.Spec.PodCIDR))
		}
	}
}
