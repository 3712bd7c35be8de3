package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/rkemeta"
)

// PhaseAPIServer holds the kube-apiserver steps of a Kubernetes minor
// upgrade (see Upgrade): every API server is upgraded, one node at a time,
// before any other component.
const PhaseAPIServer Phase = "apiserver"

// Upgrade is a Kubernetes minor version upgrade that a plan carries out:
// a step that moves a Kubernetes component (kube-apiserver, controller
// manager, scheduler, kubelet, kube-proxy) to a newer minor version than
// it runs. Its steps follow Kubernetes' version skew policy:
//
//   - a snapshot of etcd before anything changes;
//   - etcd first, when its version changes (PhaseEtcd);
//   - every API server, one node at a time, before any other component
//     (PhaseAPIServer): controllers and kubelets must not be newer than
//     an API server they talk to;
//   - the controller managers and schedulers (PhaseControlPlane), each of
//     which talks to its own node's API server;
//   - the kubelets and kube-proxies (PhaseWorker), each node drained
//     first (Drain): in-place minor upgrades of a kubelet are not
//     supported.
//
// While a controlplane node does not answer, its API server may run the
// older minor: the kubelets and kube-proxies that would move to the newer
// one wait (Held), and the plan leaves them out.
type Upgrade struct {
	// From is the oldest version a Kubernetes component of a node that
	// answered runs, To the newest one cluster.yml asks for (image tags).
	From string `json:"from"`
	To   string `json:"to"`
	// Drain are the nodes whose kubelet moves to a newer minor version, in
	// plan order: each is drained before its kubelet changes, whatever
	// upgrade_strategy.drain says.
	Drain []string `json:"drain,omitempty"`
	// Held says why the kubelets and kube-proxies stay on the older minor
	// in this plan; empty when they move.
	Held string `json:"held,omitempty"`
}

// Drains reports whether the upgrade drains the node before its kubelet
// changes.
func (u *Upgrade) Drains(node string) bool {
	return u != nil && slices.Contains(u.Drain, node)
}

// raisesMinor reports whether a step moves a Kubernetes component to a
// newer minor version than the image it runs (comparing the images' tags,
// as CheckDowngrade does).
func raisesMinor(s Step) bool {
	if s.Before == nil || s.After == nil || !slices.Contains(kubeComponents, s.Component) {
		return false
	}
	r, w := minorOf(rkemeta.ImageTag(s.Before.Image)), minorOf(rkemeta.ImageTag(s.After.Image))
	return r >= 0 && w > r
}

// upgrade finds the Kubernetes minor upgrade among the steps, grouped by
// phase as Compute collects them, and orders them for it: the API
// servers' steps move to PhaseAPIServer, and the kubelets and
// kube-proxies that move up a minor are left out while a controlplane
// node of d did not answer (p.Unreachable). It returns nil, and leaves
// the phases alone, when no step raises a minor version.
func upgrade(d *desired.Cluster, o *observe.Cluster, p *Plan, phases map[Phase][]Step) *Upgrade {
	var u *Upgrade
	for _, steps := range phases {
		for _, s := range steps {
			if !raisesMinor(s) {
				continue
			}
			if u == nil {
				u = &Upgrade{}
			}
			if to := rkemeta.ImageTag(s.After.Image); u.To == "" || newerTag(to, u.To) {
				u.To = to
			}
		}
	}
	if u == nil {
		return nil
	}
	u.From = oldestRunning(o)

	var cp []Step
	for _, s := range phases[PhaseControlPlane] {
		if s.Component == desired.KubeAPIServer {
			s.Phase = PhaseAPIServer
			phases[PhaseAPIServer] = append(phases[PhaseAPIServer], s)
			continue
		}
		cp = append(cp, s)
	}
	phases[PhaseControlPlane] = cp

	var down []string
	for _, n := range d.Nodes {
		if n.HasRole(spec.RoleControlPlane) && slices.ContainsFunc(p.Unreachable, func(x Unreachable) bool { return x.Node == n.Address }) {
			down = append(down, n.Address)
		}
	}
	if len(down) > 0 {
		u.Held = fmt.Sprintf("the kubelets and kube-proxies stay on their minor version until every API server runs %s: "+
			"the controlplane node(s) %s did not answer, and their API server may run an older one (the version skew policy: "+
			"a kubelet must not be newer than any API server)", u.To, strings.Join(down, ", "))
		phases[PhaseWorker] = slices.DeleteFunc(phases[PhaseWorker], func(s Step) bool {
			return (s.Component == desired.Kubelet || s.Component == desired.KubeProxy) && raisesMinor(s)
		})
		return u
	}
	for _, s := range phases[PhaseWorker] {
		if s.Component == desired.Kubelet && raisesMinor(s) && !slices.Contains(u.Drain, s.Node) {
			u.Drain = append(u.Drain, s.Node)
		}
	}
	return u
}

// newerTag reports whether the version tag a is newer than b, or b names
// no version.
func newerTag(a, b string) bool {
	va, oka := tagVersion(a)
	vb, okb := tagVersion(b)
	return oka && (!okb || va.GT(vb))
}

// oldestRunning is the oldest version tag among the Kubernetes components
// of the nodes that answered, or "" when none has one.
func oldestRunning(o *observe.Cluster) string {
	oldest := ""
	for _, n := range o.Nodes {
		if n == nil || !n.Reachable {
			continue
		}
		for name, c := range n.Containers {
			if !slices.Contains(kubeComponents, name) {
				continue
			}
			tag := rkemeta.ImageTag(c.Image)
			if _, ok := tagVersion(tag); !ok {
				continue
			}
			if oldest == "" || newerTag(oldest, tag) {
				oldest = tag
			}
		}
	}
	return oldest
}

// Describe is the upgrade as Render prints it: the versions and the order
// its steps follow.
func (u *Upgrade) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Kubernetes upgrade %s → %s, in the version skew policy's order: an etcd snapshot first; etcd if its version changes; "+
		"every API server, one node at a time; then the controller managers and schedulers; then the kubelets and kube-proxies", u.From, u.To)
	if len(u.Drain) > 0 {
		fmt.Fprintf(&b, ", each node drained first (%s)", strings.Join(u.Drain, ", "))
	}
	b.WriteString(".")
	if u.Held != "" {
		b.WriteString(" Not in this plan: " + u.Held + ".")
	}
	return b.String()
}
