package doctor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/errdefs"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/observe"
)

// The pod-network check runs a probe pod on every Ready node (a DaemonSet
// of the pause image, which every node has: its pods' sandboxes run it)
// and pings, from inside each node's probe pod, the probe pods of the
// other nodes: the N×N matrix Rancher's troubleshooting guide has people
// build by hand. The pings run in a one-shot helper container that joins
// the probe pod's network namespace through the node's Docker engine, so
// no exec through the API server is needed. The DaemonSet is the one
// thing rigger doctor creates; it is deleted when the walk ends.
const (
	// probeLabel marks the probe DaemonSets and their pods.
	probeLabel = "app.kubernetes.io/managed-by"
	probeValue = "rigger-doctor"
	// probeCreate bounds the making of the probe DaemonSet, probeStart
	// the wait for its pods to run.
	probeCreate = 20 * time.Second
	probeStart  = 45 * time.Second
	// probeLeftover is the age past which a probe DaemonSet is another
	// doctor's that was cut short, deleted when a walk starts.
	probeLeftover = 10 * time.Minute
)

// podProbe is one Doctor run's probe DaemonSet and its pods.
type podProbe struct {
	// created is closed once the DaemonSet was made (cs and name set) or
	// could not be (err); nil when no probe was started.
	created chan struct{}
	cs      kubernetes.Interface
	ds      *appsv1.DaemonSet
	err     error
	// pods are the probe pods with an address, by Node name; missing
	// says why a Ready node's probe pod did not run. Both are read once.
	once    sync.Once
	pods    map[string]corev1.Pod
	missing map[string]string
}

// podNetwork is the pod-network check of node.
func (r *walker) podNetwork(ctx context.Context, node string) Result {
	if p := r.c.Network.Plugin; p == "" || p == "none" {
		return Skipped("no network plugin")
	}
	k := r.o.Kubernetes
	if k == nil || k.Err != nil || k.Link == nil || k.Link.Owned[node] == nil {
		return Skipped("the node's Node was not listed")
	}
	self := k.Link.Owned[node].Name
	if r.probe.created == nil {
		return Skipped("the probe was not started")
	}
	p := r.probePods(ctx)
	switch {
	case p.err != nil:
		return Failed("probe pods on the Ready nodes", p.err.Error(),
			"the API server refused the probe DaemonSet; skip this check (--skip pod-network) where doctor may not create it")
	case p.missing[self] != "":
		return Failed("a probe pod to run on the node", p.missing[self],
			"a pod that cannot start here is what the kubelet's and the network plugin's logs explain (failed to set up sandbox, cni plugin not initialized): see the containers and cni checks, and kubectl -n kube-system describe pod")
	}
	if _, ok := p.pods[self]; !ok {
		return Skipped("no probe pod was waited for on this node (it was not Ready, or its engine did not answer, when the walk began)")
	}
	var peers []OverlayPeer
	for name, pod := range p.pods {
		if name != self {
			peers = append(peers, OverlayPeer{Node: name, Address: pod.Status.PodIP})
		}
	}
	slices.SortFunc(peers, func(a, b OverlayPeer) int { return strings.Compare(a.Node, b.Node) })
	var slow []string
	for name, why := range p.missing {
		if name != self {
			slow = append(slow, name+" ("+why+")")
		}
	}
	slices.Sort(slow)
	if len(peers) == 0 {
		return Skipped("no probe pod runs on another node")
	}
	h, err := r.pingFromPod(ctx, node, p.pods[self], peers)
	if err != nil {
		return Failed("a helper container in the probe pod's network", err.Error(),
			"check that the node's Docker engine runs containers (docker run --rm "+r.c.SystemImages.Alpine+" true)")
	}
	res := PodNetwork(peers, h.Overlay, h.OverlayMTU)
	if res.Level == Pass && len(slow) > 0 {
		res.Found += "; not asked, their probe pod did not run: " + strings.Join(slow, ", ")
	}
	return res
}

// createProbe makes the probe DaemonSet, at the start of the walk so that
// its pods start while the other checks run.
func (r *walker) createProbe(ctx context.Context) {
	p := &r.probe
	defer close(p.created)
	ctx, cancel := context.WithTimeout(ctx, probeCreate)
	defer cancel()
	cs, err := r.rd.Kube()
	if err != nil {
		p.err = err
		return
	}
	p.cs = cs
	r.removeLeftoverProbes(ctx)
	p.ds, err = cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Create(ctx, probeDaemonSet(r.c.SystemImages.PodInfraContainer),
		metav1.CreateOptions{FieldManager: "rigger-doctor"})
	if err != nil {
		p.err = fmt.Errorf("create the probe DaemonSet: %w", err)
	}
}

// probePods waits, once, for a probe pod with an address on every Ready
// node, or for probeStart.
func (r *walker) probePods(ctx context.Context) *podProbe {
	p := &r.probe
	select {
	case <-p.created:
	case <-ctx.Done():
		return &podProbe{err: ctx.Err()}
	}
	p.once.Do(func() {
		if p.err == nil {
			p.pods, p.missing, p.err = r.waitProbePods(ctx, p.cs, p.ds)
		}
	})
	return p
}

// probeDaemonSet is the probe DaemonSet: the pause image on every node,
// whatever its taints, with nothing mounted and no privilege.
func probeDaemonSet(image string) *appsv1.DaemonSet {
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	name := "rigger-doctor-probe-" + hex.EncodeToString(suffix)
	labels := map[string]string{probeLabel: probeValue, "rigger.io/doctor-probe": name}
	no := false
	zero := int64(0)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "probe", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no},
					}},
					// The helper container that pings from it is a Linux one.
					NodeSelector:                  map[string]string{corev1.LabelOSStable: "linux"},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					AutomountServiceAccountToken:  &no,
					TerminationGracePeriodSeconds: &zero,
					EnableServiceLinks:            &no,
				},
			},
		},
	}
}

// waitProbePods waits for a probe pod with an address on every Ready
// node, for probeStart at most; what it has then is what the checks
// judge, with why each Ready node has none.
func (r *walker) waitProbePods(ctx context.Context, cs kubernetes.Interface, ds *appsv1.DaemonSet) (map[string]corev1.Pod, map[string]string, error) {
	// The nodes a probe pod is waited for: Linux, Ready, and their engine
	// answered (a node whose Docker is down stays Ready for a while).
	var ready []string
	for addr, n := range r.o.Kubernetes.Link.Owned {
		if n == nil || n.Labels[corev1.LabelOSStable] != "linux" {
			continue
		}
		if on := r.o.Nodes[addr]; observe.Ready(n) == string(corev1.ConditionTrue) && on != nil && on.Reachable {
			ready = append(ready, n.Name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, probeStart)
	defer cancel()
	sel := metav1.FormatLabelSelector(ds.Spec.Selector)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var pods map[string]corev1.Pod
	var missing map[string]string
	for {
		list, err := cs.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			pods, missing = map[string]corev1.Pod{}, map[string]string{}
			for _, p := range list.Items {
				if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
					pods[p.Spec.NodeName] = p
				}
			}
			for _, n := range ready {
				if _, ok := pods[n]; !ok {
					missing[n] = probeWaiting(list.Items, n)
				}
			}
			if len(missing) == 0 {
				return pods, nil, nil
			}
		}
		select {
		case <-ctx.Done():
			if pods == nil {
				return nil, nil, fmt.Errorf("list the probe pods: %w", err)
			}
			for n, why := range missing {
				missing[n] = fmt.Sprintf("%s after %s", why, probeStart)
			}
			return pods, missing, nil
		case <-tick.C:
		}
	}
}

// probeWaiting says why the probe pod of Node node does not run.
func probeWaiting(pods []corev1.Pod, node string) string {
	for _, p := range pods {
		if p.Spec.NodeName != node {
			continue
		}
		for _, s := range p.Status.ContainerStatuses {
			if w := s.State.Waiting; w != nil {
				return fmt.Sprintf("probe pod %s waiting: %s %s", p.Name, w.Reason, w.Message)
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				return fmt.Sprintf("probe pod %s: %s %s", p.Name, c.Reason, c.Message)
			}
		}
		return fmt.Sprintf("probe pod %s %s", p.Name, p.Status.Phase)
	}
	return "no probe pod made for it (the DaemonSet controller: kube-controller-manager)"
}

// pingFromPod pings peers from inside pod, on node, through a helper
// container that joins the network namespace of the pod's sandbox.
func (r *walker) pingFromPod(ctx context.Context, node string, pod corev1.Pod, peers []OverlayPeer) (*Host, error) {
	e, err := r.rd.Engine(ctx, node)
	if err != nil {
		return nil, err
	}
	img := r.c.SystemImages.Alpine
	if _, err := e.ImageInspect(ctx, img); errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("the helper image %s is not on the node (rigger apply pulls it)", img)
	}
	list, err := e.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", "io.kubernetes.pod.uid="+string(pod.UID)),
		filters.Arg("label", "io.kubernetes.docker.type=podsandbox"),
		filters.Arg("status", "running"))})
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, errors.New("the probe pod " + pod.Name + "'s sandbox container does not run on the node")
	}
	var addrs []string
	for _, p := range peers {
		addrs = append(addrs, p.Address)
	}
	out, err := dockerop.RunOutput(ctx, e, node, img, []string{"sh", "-c", PodScript}, dockerop.RunOptions{
		NetworkMode: "container:" + list[0].ID,
		Env:         []string{"PEERS=" + strings.Join(addrs, " "), "DNS=" + r.dnsServer(), "DNS_NAME=" + r.dnsName()},
	})
	if err != nil {
		return nil, err
	}
	h, err := ParseHost(out)
	if err == nil {
		r.mu.Lock()
		r.fromPod[node] = h
		r.mu.Unlock()
	}
	return h, err
}

// removeProbe deletes the run's probe DaemonSet and its pods.
func (r *walker) removeProbe(ctx context.Context) {
	p := &r.probe
	if p.created == nil {
		return
	}
	<-p.created
	if p.ds == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	if err := p.cs.AppsV1().DaemonSets(metav1.NamespaceSystem).Delete(ctx, p.ds.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		r.rd.Log.Warn("the probe DaemonSet of rigger doctor was not deleted: kubectl -n kube-system delete daemonset "+p.ds.Name, "error", err)
	}
}

// removeLeftoverProbes deletes the probe DaemonSets of doctors cut short.
func (r *walker) removeLeftoverProbes(ctx context.Context) {
	cs := r.probe.cs
	list, err := cs.AppsV1().DaemonSets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: probeLabel + "=" + probeValue})
	if err != nil {
		return
	}
	bg := metav1.DeletePropagationBackground
	for _, ds := range list.Items {
		if r.now.Sub(ds.CreationTimestamp.Time) > probeLeftover {
			_ = cs.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
		}
	}
}

// nodeWatchWindow is how long Doctor watches the Nodes' updates, from the
// start of its read: most of the walk's own time.
const nodeWatchWindow = 3 * time.Second

// nodeWatch counts the updates of each Node while Doctor watches.
type nodeWatch struct {
	done  chan struct{}
	began time.Time
	ended time.Time
	// updates by Node name; managers' last write times, by Node name and
	// manager, to tell which made an update.
	updates map[string]*NodeUpdates
	last    map[string]map[string]time.Time
	// stop ends the watch before its window (the walk is over).
	stop context.CancelFunc
}

// watchNodes watches the Nodes for nodeWatchWindow; nil when the API
// server was not reached.
func (r *walker) watchNodes(ctx context.Context) *nodeWatch {
	if r.o.Kubernetes == nil || r.o.Kubernetes.Err != nil {
		return nil
	}
	cs, err := r.rd.Kube()
	if err != nil {
		return nil
	}
	w := &nodeWatch{done: make(chan struct{}), updates: map[string]*NodeUpdates{}, last: map[string]map[string]time.Time{}}
	// The window starts once the API server has answered the watch: on a
	// loaded one the answer alone can take most of it, and a fight judged
	// on the second left would pass.
	ctx, cancel := context.WithCancel(ctx)
	window := time.AfterFunc(nodeWatchWindow, cancel)
	wi, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		return nil
	}
	w.began = time.Now()
	window.Reset(nodeWatchWindow)
	w.stop = cancel
	go func() {
		defer close(w.done)
		defer cancel()
		defer wi.Stop()
		for {
			select {
			case <-ctx.Done():
				w.ended = time.Now()
				return
			case ev, ok := <-wi.ResultChan():
				if !ok { // the API server ended it early: judged on what was seen
					w.ended = time.Now()
					return
				}
				if n, isNode := ev.Object.(*corev1.Node); isNode {
					w.saw(string(ev.Type), n)
				}
			}
		}
	}()
	return w
}

// saw counts an event of the watch: an update of n, by the managers whose
// last write time moved (those of the newest write when none did).
func (w *nodeWatch) saw(typ string, n *corev1.Node) {
	times := map[string]time.Time{}
	var newest time.Time
	for _, m := range n.ManagedFields {
		if m.Time == nil {
			continue
		}
		if t := m.Time.Time; t.After(times[m.Manager]) {
			times[m.Manager] = t
		}
		if m.Time.After(newest) {
			newest = m.Time.Time
		}
	}
	before := w.last[n.Name]
	w.last[n.Name] = times
	if typ != "MODIFIED" {
		return
	}
	u := w.updates[n.Name]
	if u == nil {
		u = &NodeUpdates{Managers: map[string]int{}}
		w.updates[n.Name] = u
	}
	u.Count++
	var by []string
	for m, t := range times {
		if t.After(before[m]) {
			by = append(by, m)
		}
	}
	if len(by) == 0 {
		for m, t := range times {
			if t.Equal(newest) {
				by = append(by, m)
			}
		}
	}
	for _, m := range by {
		u.Managers[m]++
	}
}

// nodeUpdates is the node-updates check of node: it waits for the end of
// the watch.
func (r *walker) nodeUpdates(ctx context.Context, node string) Result {
	k := r.o.Kubernetes
	if k == nil || k.Err != nil || k.Link == nil || k.Link.Owned[node] == nil {
		return Skipped("the node's Node was not listed")
	}
	w := r.nodes
	if w == nil {
		return Skipped("the Nodes could not be watched")
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		return Skipped("the watch of the Nodes did not end in time")
	}
	name := k.Link.Owned[node].Name
	u := NodeUpdates{Window: w.ended.Sub(w.began)}
	if got := w.updates[name]; got != nil {
		u.Count, u.Managers = got.Count, got.Managers
	}
	return Updates(name, u)
}
