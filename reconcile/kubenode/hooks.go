package kubenode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/clip"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
)

// DefaultReadyTimeout is how long AfterNode waits for a new or changed
// kubelet's Node to be Ready.
const DefaultReadyTimeout = 2 * time.Minute

// Config is what Hooks need.
type Config struct {
	// Client is the cluster's API server.
	Client kubernetes.Interface
	// Machines are the nodes of cluster.yml.
	Machines []Machine
	// Drain: upgrade_strategy.drain. Nodes are cordoned before their
	// changes either way.
	Drain      bool
	DrainInput spec.NodeDrainInput
	// Self is rigger's own pod, when it runs in the cluster it applies to
	// (observe.Kubernetes.Self; nil: it does not): the drains leave it
	// where it runs (evicted, it would stop the apply half-way, its node
	// cordoned) and evict its other replicas without their caches (Drain).
	Self *observe.Self
	// ReadyTimeout bounds the wait for a Node to be Ready (zero:
	// DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Logs returns the last log lines of a component on a node, for the
	// error of a Node that does not become Ready; nil: none.
	Logs func(ctx context.Context, node, component string) string
	// NetworkPlugin is the label selector of the network plugin's
	// DaemonSets: while a Node is waited for, its network plugin pod is
	// recreated when the Node has no pod network although the pod runs
	// (see NoNetwork). "": the cluster has none.
	NetworkPlugin string
	// NodeSubnets says the network plugin gives each pod an address of
	// its Node's pod subnet (flannel, canal): pods left outside it are
	// made again (networkRepair.strandedPods). Calico's and Weave's own
	// address management does not follow the Node's subnet.
	NodeSubnets bool
	// ControllerLeader says the kube-controller-managers elect a leader
	// (their leader-elect is not false): once the plan replaced, restarted
	// or removed one of them, the next drain first waits for one to lead
	// (WaitLeader). Without it, the pods a drain evicts stay in the
	// Services' endpoints until one does.
	ControllerLeader bool
	// Say reports progress, one line per call; it may be called from
	// several goroutines at once. Nil: silent.
	Say func(node, message string)
}

// Hooks are execute.Options' BeforeNode and AfterNode for one plan: they
// cordon (and drain) a node whose components are about to be replaced or
// restarted, and once those changes are done wait for its Node to be
// Ready, set its labels and taints, and uncordon it. A node changed in
// several phases is cordoned around each of them, not from the first to
// the last: in between, the other nodes' changes need somewhere for pods
// to go (a Kubernetes upgrade visits every node for its API server before
// any for its kubelet).
type Hooks struct {
	cfg Config
	// upgrade is the plan's Kubernetes upgrade (nil: none): its nodes are
	// drained before their kubelet changes.
	upgrade *plan.Upgrade
	mu      sync.Mutex
	// heartbeat is the Ready heartbeat of a node's Node before its
	// kubelet changed, by address.
	heartbeat map[string]time.Time
	// wasReady are the nodes whose Node was Ready when BeforeNode cordoned
	// it, by address: a restart of the node's API server or kube-proxy can
	// make it NotReady for a while, and it is uncordoned once Ready again.
	wasReady map[string]bool
	// repair puts the network plugin on a Node again (nil: none).
	repair *networkRepair
	// controllersMoved: a controller manager was replaced, restarted or
	// removed since a drain last found one leading.
	controllersMoved bool
}

// NewHooks returns the hooks for plan p.
func NewHooks(cfg Config, p *plan.Plan) *Hooks {
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	return &Hooks{cfg: cfg, upgrade: p.Upgrade, heartbeat: map[string]time.Time{}, wasReady: map[string]bool{},
		repair: newNetworkRepair(cfg.Client, cfg.NetworkPlugin, cfg.NodeSubnets, func(node, msg string) {
			if cfg.Say != nil {
				cfg.Say(node, msg)
			}
		})}
}

func (h *Hooks) say(node, format string, args ...any) {
	if h.cfg.Say != nil {
		h.cfg.Say(node, fmt.Sprintf(format, args...))
	}
}

func (h *Hooks) machine(address string) Machine {
	for _, m := range h.cfg.Machines {
		if m.Address == address {
			return m
		}
	}
	return Machine{Address: address}
}

// disrupts are the components whose replacement or restart disturbs the
// node's pods or its API server: the node is cordoned (and drained) first.
var disrupts = map[string]bool{
	desired.Kubelet: true, desired.KubeProxy: true, desired.ServiceSidekick: true,
	desired.KubeAPIServer: true, desired.KubeControllerManager: true, desired.KubeScheduler: true,
}

// Disruptive reports whether steps replace or restart a component that
// serves the node's pods (or the cluster's API), so that the node must be
// cordoned, and drained when asked, first. Creating a missing component
// is not: the node was not serving with it anyway.
func Disruptive(steps []plan.Step) bool {
	for _, s := range steps {
		if (s.Action == plan.Replace || s.Action == plan.Restart) && disrupts[s.Component] {
			return true
		}
	}
	return false
}

// touchesKubelet reports whether the steps create, replace or restart the
// kubelet: its Node must then be Ready again.
func touchesKubelet(steps []plan.Step) bool {
	for _, s := range steps {
		if s.Component == desired.Kubelet && s.Action != plan.Remove {
			return true
		}
	}
	return false
}

// BeforeNode cordons the node's Node when the steps are Disruptive, and
// drains it when asked (upgrade_strategy.drain), or when a Kubernetes
// upgrade moves its kubelet to a newer minor version (plan.Upgrade.Drain:
// the version skew policy does not support that in place), and the Node
// is Ready (a NotReady Node's pods cannot be evicted: its kubelet does not
// answer). A
// node without a Node, or an API server that does not answer (the one
// being repaired, say), is no reason to stop: the changes go on. A failed
// drain stops them, and uncordons the Node. Once the plan stopped a
// controller manager (Config.ControllerLeader), the next drain first waits
// for one to lead (WaitLeader); none in time stops the changes as a failed
// drain does.
//
// When the kubelet changes, BeforeNode notes the Node's last heartbeat: the
// Node counts as Ready again only once the new kubelet reported.
func (h *Hooks) BeforeNode(ctx context.Context, node string, steps []plan.Step) error {
	if h.cfg.ControllerLeader && movesControllers(steps) {
		// After this node's drain: its controller manager changes once
		// BeforeNode returns.
		defer func() {
			h.mu.Lock()
			h.controllersMoved = true
			h.mu.Unlock()
		}()
	}
	if !Disruptive(steps) && !touchesKubelet(steps) {
		return nil
	}
	m := h.machine(node)
	nodes, err := FindNodes(ctx, h.cfg.Client, node, m.Hostname)
	if err != nil {
		if Disruptive(steps) {
			h.say(node, "not cordoned: %v", err)
		}
		return nil
	}
	l := Link([]Machine{m}, nodes)
	n := l.Owned[node]
	if n == nil {
		return nil
	}
	if touchesKubelet(steps) {
		h.mu.Lock()
		h.heartbeat[node] = Heartbeat(n)
		h.mu.Unlock()
	}
	if !Disruptive(steps) {
		return nil
	}
	cordoned, err := Cordon(ctx, h.cfg.Client, n)
	if err != nil {
		return err
	}
	_, ours := n.Annotations[AnnotationCordoned]
	if observe.Ready(n) == string(corev1.ConditionTrue) {
		h.mu.Lock()
		h.wasReady[node] = true
		h.mu.Unlock()
	}
	switch {
	case cordoned:
		h.say(node, "cordoned Node %s", n.Name)
	case !ours:
		h.say(node, "Node %s was cordoned already (not by rigger: it stays cordoned)", n.Name)
	}
	if !h.cfg.Drain && !(h.upgrade.Drains(node) && touchesKubelet(steps)) {
		return nil
	}
	if r := observe.Ready(n); r != string(corev1.ConditionTrue) {
		h.say(node, "Node %s not drained: it is not Ready (%s)", n.Name, r)
		return nil
	}
	if err := h.waitLeader(ctx, node); err != nil {
		return h.undoCordon(ctx, m, n.Name, cordoned || ours, err)
	}
	began := time.Now()
	drained, err := Drain(ctx, h.cfg.Client, n.Name, h.cfg.DrainInput, h.cfg.Self, func(pod string, err error) {
		h.say(node, "draining Node %s: the eviction of %s waits for its PodDisruptionBudget (%v); kubectl's drain tries again every 5 s", n.Name, pod, err)
	})
	if err != nil {
		return h.undoCordon(ctx, m, n.Name, cordoned || ours, err)
	}
	msg := fmt.Sprintf("drained Node %s: %d pod(s) evicted (%s", n.Name, drained.Evicted, time.Since(began).Round(100*time.Millisecond))
	if drained.Last != "" {
		msg += fmt.Sprintf("; the last gone, after %s: %s", drained.Gone.Round(100*time.Millisecond), drained.Last)
	}
	msg += ")"
	if held := drained.DescribeHeld(); held != "" {
		msg += "; " + held
	}
	if drained.Kept != "" {
		msg += "; rigger's own pod " + drained.Kept + " left on it: it carries this apply out"
	}
	h.say(node, "%s", msg)
	return nil
}

// undoCordon is the error err of BeforeNode for machine m before any of
// its changes, its Node (named name) uncordoned again when rigger had
// cordoned it (ours).
func (h *Hooks) undoCordon(ctx context.Context, m Machine, name string, ours bool, err error) error {
	if ours {
		if fresh, gerr := FindNodes(context.WithoutCancel(ctx), h.cfg.Client, m.Address, m.Hostname); gerr == nil {
			if o := Link([]Machine{m}, fresh).Owned[m.Address]; o != nil {
				if _, uerr := Uncordon(context.WithoutCancel(ctx), h.cfg.Client, o); uerr == nil {
					err = fmt.Errorf("%w (Node %s uncordoned again; nothing on the node changed)", err, name)
				}
			}
		}
	}
	return fmt.Errorf("node %s: %w", m.Address, err)
}

// movesControllers reports whether steps stop a running controller
// manager: it may hold ControllerLease.
func movesControllers(steps []plan.Step) bool {
	for _, s := range steps {
		if s.Component == desired.KubeControllerManager && s.Action != plan.Create {
			return true
		}
	}
	return false
}

// waitLeader waits, before a drain, for a controller manager to lead
// when one was stopped since the last drain found one leading.
func (h *Hooks) waitLeader(ctx context.Context, node string) error {
	h.mu.Lock()
	moved := h.controllersMoved
	h.mu.Unlock()
	if !moved {
		return nil
	}
	waited, err := WaitLeader(ctx, h.cfg.Client)
	if err != nil {
		return err
	}
	if waited > 0 {
		h.say(node, "a kube-controller-manager leads again (waited %s for its Lease): the drain goes on", waited.Round(100*time.Millisecond))
	}
	h.mu.Lock()
	h.controllersMoved = false
	h.mu.Unlock()
	return nil
}

// AfterNode runs once the node's changed components are healthy: when the
// kubelet was created, replaced or restarted, it waits for the Node to be
// registered and Ready (the error names the kubelet's last log lines and
// says the next apply tries again), then sets its labels and taints. When
// BeforeNode cordoned the Node for these steps, it uncordons it.
func (h *Hooks) AfterNode(ctx context.Context, node string, steps []plan.Step) error {
	m := h.machine(node)
	var n *corev1.Node
	if touchesKubelet(steps) {
		began := time.Now()
		h.mu.Lock()
		after := h.heartbeat[node]
		h.mu.Unlock()
		var err error
		n, err = waitReady(ctx, h.cfg.Client, node, m.Hostname, after, h.cfg.ReadyTimeout, h.repair)
		if err != nil {
			if nr := (*NotReadyError)(nil); errors.As(err, &nr) {
				if nr.Node != "" {
					nr.Pods = nodePods(context.WithoutCancel(ctx), h.cfg.Client, nr.Node)
				}
				if h.cfg.Logs != nil {
					nr.Logs = h.cfg.Logs(context.WithoutCancel(ctx), node, desired.Kubelet)
				}
			}
			return err
		}
		h.say(node, "Node %s Ready (%s)", n.Name, time.Since(began).Round(100*time.Millisecond))
		if c, err := Sync(ctx, h.cfg.Client, n.Name, m); err != nil {
			return fmt.Errorf("node %s: %w", node, err)
		} else if c != nil {
			h.say(node, "Node %s: %s", n.Name, c)
		}
	}
	if !Disruptive(steps) {
		return nil
	}
	if n == nil {
		nodes, err := FindNodes(ctx, h.cfg.Client, node, m.Hostname)
		if err != nil {
			if Disruptive(steps) {
				return fmt.Errorf("node %s: uncordon: %w", node, err)
			}
			return nil
		}
		if n = Link([]Machine{m}, nodes).Owned[node]; n == nil {
			return nil
		}
	}
	if _, ours := n.Annotations[AnnotationCordoned]; !ours {
		return nil
	}
	if r := observe.Ready(n); r != string(corev1.ConditionTrue) {
		h.mu.Lock()
		wasReady := h.wasReady[node]
		h.mu.Unlock()
		if !wasReady {
			// Uncordoned by a later apply, once Ready.
			h.say(node, "Node %s left cordoned: not Ready (%s)", n.Name, r)
			return nil
		}
		// Ready before its changes: the node lifecycle controller can
		// mark it Unknown while the API servers restart. Its kubelet
		// reports again within the node-status period.
		began := time.Now()
		ready, err := waitReady(ctx, h.cfg.Client, node, m.Hostname, Heartbeat(n), h.cfg.ReadyTimeout, h.repair)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			h.say(node, "Node %s left cordoned: not Ready (%s) %s after its changes", n.Name, r, time.Since(began).Round(time.Second))
			return nil
		}
		h.say(node, "Node %s Ready again (%s; it was %s)", n.Name, time.Since(began).Round(100*time.Millisecond), readyCondition(n))
		n = ready
	}
	if _, err := Uncordon(ctx, h.cfg.Client, n); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	h.say(node, "uncordoned Node %s", n.Name)
	return nil
}

// Reconciled is what Reconcile found and did.
type Reconciled struct {
	Linkage *observe.Linkage
	// Synced are the Nodes whose labels or taints changed, by name.
	Synced []string
	// Uncordoned are Nodes an earlier apply left cordoned.
	Uncordoned []string
	// Deleted are stale Nodes deleted (stale_nodes: delete).
	Deleted []string
}

// ReconcileOptions are what Reconcile does beyond labels and taints.
type ReconcileOptions struct {
	// Delete are the stale Nodes the plan deletes (the Pending changes of
	// Changes that delete, under rigger.stale_nodes: delete), by name:
	// Reconcile deletes those that are stale still, and no other.
	Delete []string
	// Down are the machines the plan could not reach, by address: their
	// Nodes are not waited for.
	Down []string
	// NetworkPlugin selects the network plugin's DaemonSets, and
	// NodeSubnets says it follows the Nodes' pod subnets (see Config).
	NetworkPlugin string
	NodeSubnets   bool
	// ReadyTimeout bounds the wait for a Node that is not Ready (zero:
	// DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Say reports progress (nil: silent).
	Say func(node, msg string)
}

// Reconcile brings every Node of the cluster in line: each Node of a
// machine that answers and is not Ready repaired and waited for (the
// network plugin's pod recreated where the Node has no pod network: see
// NoNetwork), and a *NotWorkingError for each one that stays so; each
// machine's labels and taints; the Nodes an interrupted apply left
// cordoned (once Ready) uncordoned; and the stale Nodes the plan deletes
// (opts.Delete) cordoned and deleted, when stale still (the others are
// only in the result).
func Reconcile(ctx context.Context, cs kubernetes.Interface, machines []Machine, opts ReconcileOptions) (*Reconciled, error) {
	say := opts.Say
	if say == nil {
		say = func(string, string) {}
	}
	var errs []error
	if err := RepairNodes(ctx, cs, machines, opts); err != nil {
		errs = append(errs, err)
	}
	nodes, err := ListNodes(ctx, cs)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	l := Link(machines, nodes)
	r := &Reconciled{Linkage: l}
	for _, m := range machines {
		n := l.Owned[m.Address]
		if n == nil {
			continue
		}
		c, err := Sync(ctx, cs, n.Name, m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if c != nil {
			r.Synced = append(r.Synced, n.Name)
			say(m.Address, fmt.Sprintf("Node %s: %s", n.Name, c))
		}
		if _, ours := n.Annotations[AnnotationCordoned]; ours && observe.Ready(n) == string(corev1.ConditionTrue) {
			if _, err := Uncordon(ctx, cs, n); err != nil {
				errs = append(errs, err)
				continue
			}
			r.Uncordoned = append(r.Uncordoned, n.Name)
			say(m.Address, fmt.Sprintf("uncordoned Node %s (cordoned by an earlier apply)", n.Name))
		}
	}
	if len(opts.Delete) > 0 {
		byName := map[string]*corev1.Node{}
		for i := range nodes {
			byName[nodes[i].Name] = &nodes[i]
		}
		for _, s := range l.Stale {
			if !slices.Contains(opts.Delete, s.Name) {
				continue
			}
			if _, err := Cordon(ctx, cs, byName[s.Name]); err != nil {
				errs = append(errs, err)
				continue
			}
			if err := Delete(ctx, cs, s.Name); err != nil {
				errs = append(errs, err)
				continue
			}
			r.Deleted = append(r.Deleted, s.Name)
			say("kubernetes", fmt.Sprintf("deleted stale Node %s (%s)", s.Name, s.Reason))
		}
	}
	return r, errors.Join(errs...)
}

// Pending is a change the Nodes need that no container step makes, for
// plans and status.
type Pending struct {
	// Node is the machine's address, or "kubernetes" for a stale Node.
	Node string `json:"node"`
	// Name is the Node's name.
	Name string `json:"name"`
	// Change says what, for people.
	Change string `json:"change"`
	// Action is what an apply does: PendingRepair, PendingSync,
	// PendingUncordon or PendingDelete.
	Action string `json:"-"`
}

// What a Pending change does.
const (
	// PendingRepair waits for a Node that is not Ready, recreating its
	// network plugin's pod when it has no pod network, and recreates the
	// plugin's pods of an earlier Node of its name.
	PendingRepair = "repair"
	// PendingSync sets the Node's labels and taints.
	PendingSync = "sync"
	// PendingUncordon uncordons a Node an earlier apply left cordoned.
	PendingUncordon = "uncordon"
	// PendingDelete deletes a stale Node (rigger.stale_nodes: delete).
	PendingDelete = "delete"
)

// Deleted are the names of the Nodes pending deletes.
func Deleted(pending []Pending) []string {
	var out []string
	for _, p := range pending {
		if p.Action == PendingDelete {
			out = append(out, p.Name)
		}
	}
	return out
}

// Changes are what Reconcile would do to nodes, as k found them (Link):
// Nodes of machines that answered (not in down) that are not Ready, or
// that have the network plugin's pods of an earlier Node of their name
// (k.StalePods) or pods outside their pod subnets (k.StrandedPods), to
// repair, labels and taints to set, Nodes an earlier
// apply left cordoned to uncordon and, with policy spec.StaleNodesDelete,
// stale Nodes to delete. It is pure.
func Changes(machines []Machine, k *observe.Kubernetes, policy string, down []string) []Pending {
	var out []Pending
	l := k.Link
	for _, m := range machines {
		n := l.Owned[m.Address]
		if n == nil {
			continue
		}
		if !slices.Contains(down, m.Address) && observe.Ready(n) != string(corev1.ConditionTrue) {
			fix := "wait for it to be Ready"
			if NoNetwork(n) {
				fix = "recreate the network plugin's pod there if it runs without installing the network, and wait for the Node to be Ready"
			}
			out = append(out, Pending{Node: m.Address, Name: n.Name, Change: "repair: not Ready (" + readyCondition(n) + "): " + fix, Action: PendingRepair})
		}
		if pods := k.StalePods[n.Name]; len(pods) > 0 && !slices.Contains(down, m.Address) {
			follows := "the Node made again (no pod subnet assigned yet)"
			if n.Spec.PodCIDR != "" {
				follows = "the Node's pod subnet " + n.Spec.PodCIDR
			}
			out = append(out, Pending{Node: m.Address, Name: n.Name, Action: PendingRepair,
				Change: fmt.Sprintf("repair: the network plugin's pod %s was made for an earlier Node of this name (deleted, and registered again): "+
					"recreate it, so that the node's pod network follows %s", strings.Join(pods, ", "), follows)})
		}
		if pods := k.StrandedPods[n.Name]; len(pods) > 0 && !slices.Contains(down, m.Address) {
			out = append(out, Pending{Node: m.Address, Name: n.Name, Action: PendingRepair,
				Change: fmt.Sprintf("repair: pods outside the Node's pod subnet %s, made before the node's network followed the Node made again: %s: "+
					"delete those a controller makes again, once the network plugin's pod there is the Node's", n.Spec.PodCIDR, strings.Join(pods, ", "))})
		}
		labels, taints := Wanted(m)
		if c := Diff(n, labels, taints); !c.Empty() {
			out = append(out, Pending{Node: m.Address, Name: n.Name, Change: c.String(), Action: PendingSync})
		}
		if _, ours := n.Annotations[AnnotationCordoned]; ours && observe.Ready(n) == string(corev1.ConditionTrue) {
			out = append(out, Pending{Node: m.Address, Name: n.Name, Change: "uncordon (cordoned by an earlier apply)", Action: PendingUncordon})
		}
	}
	if policy == spec.StaleNodesDelete {
		for _, s := range l.Stale {
			out = append(out, Pending{Node: "kubernetes", Name: s.Name, Change: "delete stale Node (" + s.Reason + ")", Action: PendingDelete})
		}
	}
	return out
}

// RenderPending writes the pending Node changes for people, one a line,
// after a title; nothing when there are none.
func RenderPending(w io.Writer, pending []Pending) {
	if len(pending) == 0 {
		return
	}
	fmt.Fprintln(w, "Pending changes to the Nodes (rigger apply makes them):")
	for _, c := range pending {
		fmt.Fprintf(w, "  ~ %s: Node %s: %s\n", c.Node, c.Name, c.Change)
	}
}

// readyCondition is the Node's Ready condition for a progress line: its status,
// and the reason that the kubelet or the node lifecycle controller gave.
func readyCondition(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Reason == "" {
				return string(c.Status)
			}
			return fmt.Sprintf("%s: %s", c.Status, clip.Ellipsis(strings.TrimSpace(c.Reason+" "+c.Message), 200))
		}
	}
	return string(corev1.ConditionUnknown) + ": no Ready condition"
}
