package plan

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec"
)

// Action is what a step does to one container.
type Action string

const (
	// Create starts a desired container that is missing.
	Create Action = "create"
	// Replace removes a container whose spec differs from the desired one,
	// or that Docker restarts over and over (a crash loop), and creates the
	// desired one in its place.
	Replace Action = "replace"
	// Remove removes a container that should not run on its node.
	Remove Action = "remove"
	// Restart starts again a container whose spec is unchanged but which is
	// not running (exited, dead, created and never started; etcd in a crash
	// loop), or which reads a file that changed.
	Restart Action = "restart"
	// WriteFiles writes the files of a node that are missing or differ
	// (Step.Files); its Component is FilesComponent.
	WriteFiles Action = "write-files"
	// AddMember adds the node's etcd member to the running etcd cluster,
	// as a learner, before its etcd container is created; it votes once
	// it has caught up. Its Component is EtcdMemberComponent.
	AddMember Action = "add-member"
	// RemoveMember removes Step.Member from the etcd cluster, before its
	// container (if any) stops. Its Component is EtcdMemberComponent.
	RemoveMember Action = "remove-member"
)

// EtcdMemberComponent is the Component of AddMember and RemoveMember.
const EtcdMemberComponent = "etcd-member"

// FilesComponent is the Component of a WriteFiles step.
const FilesComponent = "files"

// Hooks receive the progress of carrying out a plan (package execute,
// and the apply around it) as it is made, one call at a time. Every field
// may be nil.
type Hooks struct {
	// Phase is called when a phase with work starts.
	Phase func(p Phase, title string)
	// Step is called when a step or health check on a node ends.
	Step func(node, message string, err error)
}

// Phase is a group of steps the executor runs together, in the order of
// the constants (see the package doc).
type Phase string

const (
	PhaseFiles        Phase = "files"
	PhaseEtcd         Phase = "etcd"
	PhaseControlPlane Phase = "controlplane"
	PhaseWorker       Phase = "worker"
	PhaseRemovedNodes Phase = "removed-nodes"
)

// Step is one change to one container.
type Step struct {
	// Node is the node's address.
	Node string
	// Component is the container's name (desired.Etcd, desired.Kubelet, …).
	Component string
	Action    Action
	// Phase is the group the step runs in.
	Phase Phase
	// Reason says why, for people only; it never holds a secret.
	Reason string
	// Before is the observed container; nil for Create.
	Before *observe.Container
	// After is the desired container; nil for Remove.
	After *desired.Container
	// Files are the paths a WriteFiles step writes, sorted.
	Files []string
	// Member is the etcd member a RemoveMember step removes, or the one an
	// AddMember step adds (its peer URL and name).
	Member *etcdmember.Member
	// AfterHash is the spec hash of After in a plan read from JSON, which
	// has no After.
	AfterHash string
}

// Unreachable is a node the plan could not be computed for.
type Unreachable struct {
	Node  string `json:"node"`
	Error string `json:"error"`
	// Removed is set for a node gone from cluster.yml: nothing is planned
	// for it and it does not block the rest of the plan.
	Removed bool `json:"removed,omitempty"`
}

// Plan is the ordered list of changes that makes the observed cluster match
// the desired one, and what could not be looked at.
type Plan struct {
	Steps []Step `json:"steps"`
	// Unreachable nodes: those of cluster.yml first, in its order, then the
	// removed ones by address.
	Unreachable []Unreachable `json:"unreachable,omitempty"`
	// RemovedNodes are the reachable observed nodes that are not in
	// cluster.yml, by address; their containers are removed in
	// PhaseRemovedNodes.
	RemovedNodes []string `json:"removed_nodes,omitempty"`
	// ObservedAt is when the observation the plan was computed from
	// started; the executor refuses a stale plan.
	ObservedAt time.Time `json:"observed_at"`
	// First are the nodes of cluster.yml whose Kubernetes Node is not
	// Ready, in cluster.yml order: their control-plane and worker changes
	// go before the others' (they serve nothing now, so changing them
	// first costs no availability).
	First []string `json:"first,omitempty"`
	// NewEtcd is set when the plan starts a new etcd cluster: every etcd
	// member of cluster.yml is created, and all of them at once (a lone
	// first member could not become healthy). Otherwise an etcd member the
	// plan creates joins the running cluster.
	NewEtcd bool `json:"new_etcd,omitempty"`
	// Upgrade is the Kubernetes minor upgrade the plan carries out, nil
	// when it changes no component's minor version.
	Upgrade *Upgrade `json:"upgrade,omitempty"`
	// WriteAgain are the resources whose objects the apply writes again
	// before the upgrade, so that its new minor can read them.
	WriteAgain []WriteAgain `json:"write_again,omitempty"`
	// SnapshotEtcdLogs, when set, are the etcd members the plan moves to
	// a minor version that cannot apply what an older one left in their
	// logs: every member saves a snapshot of its log first.
	SnapshotEtcdLogs *SnapshotEtcdLogs `json:"snapshot_etcd_logs,omitempty"`
	// Restarted are the components of cluster.yml running in containers
	// that started again since the last apply (observe.Container's
	// StartedSince): not by rigger, and so worth a look, but nothing to
	// change. By node, then component.
	Restarted []Restarted `json:"restarted,omitempty"`
}

// Restarted is a component whose container started again since the last
// apply.
type Restarted struct {
	Node      string `json:"node"`
	Component string `json:"component"`
	// Restarts is how many times Docker's restart policy restarted it
	// since rigger last started it (0: the engine or someone else did).
	Restarts int `json:"restarts"`
}

// String says what happened, and where to look.
func (r Restarted) String() string {
	by := "by a restart of the Docker engine or the machine, or by hand"
	if r.Restarts > 0 {
		by = fmt.Sprintf("Docker restarted it %s since rigger started it: it exited (docker logs %s on the node says why)", times(r.Restarts), r.Component)
	}
	return fmt.Sprintf("%s %s started again since the last apply, %s", r.Node, r.Component, by)
}

// Empty reports whether the plan changes nothing.
func (p *Plan) Empty() bool { return len(p.Steps) == 0 }

// UnreachableNodes are the nodes of cluster.yml the plan could not look at
// (removed nodes that did not answer are not counted: they block nothing).
func (p *Plan) UnreachableNodes() []string {
	var out []string
	for _, u := range p.Unreachable {
		if !u.Removed {
			out = append(out, u.Node)
		}
	}
	return out
}

// Count returns the number of steps with the action.
func (p *Plan) Count(a Action) int {
	n := 0
	for _, s := range p.Steps {
		if s.Action == a {
			n++
		}
	}
	return n
}

// Reasons of the steps that do not depend on what changed, and the error
// of a node of cluster.yml that the observation lacks.
const (
	reasonMissing     = "container missing"
	reasonHashDiffers = "spec hash differs"
	reasonNotDesired  = "not desired on this node"
	reasonNodeRemoved = "node removed from cluster.yml"
	errNotObserved    = "node was not observed"
	// ReasonNodeMissing is the reason of a kubelet restart for a machine
	// whose Kubernetes Node is gone while its kubelet runs.
	ReasonNodeMissing = "its Kubernetes Node is missing (deleted?): the kubelet registers it again when it starts"
	// ReasonRotation is the reason of a restart for a certificate rotation
	// under way (desired.Node.Reload).
	ReasonRotation = "reads rotated certificates"
)

// Compute returns the plan that turns o into d. It is pure: it reads its
// arguments and returns a new value whose Before and After point at copies
// of observed containers and into d. A nil o is an observation of no node:
// every node of d is then unreachable.
//
// Besides the containers and files, it decides from the observed
// Kubernetes Nodes (o.Kubernetes, when the API server answered) which
// kubelets restart because their Node is missing, and which nodes go
// first (Plan.First); and from the etcd steps whether etcd starts as a new
// cluster (Plan.NewEtcd).
func Compute(d *desired.Cluster, o *observe.Cluster) *Plan {
	if o == nil {
		o = &observe.Cluster{}
	}
	p := &Plan{ObservedAt: o.At}
	var (
		phases    = map[Phase][]Step{}
		inDesired = make(map[string]bool, len(d.Nodes))
	)
	for i := range d.Nodes {
		dn := &d.Nodes[i]
		inDesired[dn.Address] = true
		on := o.Nodes[dn.Address]
		if on == nil || !on.Reachable {
			p.Unreachable = append(p.Unreachable, Unreachable{Node: dn.Address, Error: nodeError(on)})
			continue
		}
		for _, s := range nodeSteps(dn, on, nodeMissing(o, dn.Address)) {
			phases[s.Phase] = append(phases[s.Phase], s)
		}
		p.Restarted = append(p.Restarted, restarted(dn, on)...)
	}
	p.NewEtcd = newEtcd(d, phases[PhaseEtcd])
	p.First = notReady(d, o)
	if o.Etcd != nil {
		phases[PhaseEtcd] = withMembership(d, o, phases[PhaseEtcd])
	}
	p.Upgrade = upgrade(d, o, p, phases)
	if p.Upgrade != nil {
		p.WriteAgain = writeAgain(o.StoredAPIs)
	}
	p.SnapshotEtcdLogs = snapshotEtcdLogs(d, o)
	for _, ph := range []Phase{PhaseFiles, PhaseEtcd, PhaseAPIServer, PhaseControlPlane, PhaseWorker} {
		p.Steps = append(p.Steps, phases[ph]...)
	}

	var removed []string
	for addr := range o.Nodes {
		if !inDesired[addr] {
			removed = append(removed, addr)
		}
	}
	slices.Sort(removed)
	for _, addr := range removed {
		on := o.Nodes[addr]
		if on == nil || !on.Reachable {
			p.Unreachable = append(p.Unreachable, Unreachable{Node: addr, Error: nodeError(on), Removed: true})
			continue
		}
		p.RemovedNodes = append(p.RemovedNodes, addr)
		for _, name := range sortedNames(on.Containers) {
			before := on.Containers[name]
			p.Steps = append(p.Steps, Step{
				Node: addr, Component: name, Action: Remove, Phase: PhaseRemovedNodes,
				Reason: reasonNodeRemoved, Before: &before,
			})
		}
	}
	return p
}

// restarted lists the components of dn whose containers on on started
// again since the last apply and run: a container restarting is a crash
// loop, which nodeSteps replaces.
func restarted(dn *desired.Node, on *observe.Node) []Restarted {
	var out []Restarted
	for _, dc := range dn.Containers {
		if oc, ok := on.Containers[dc.Name]; ok && oc.StartedSince && oc.State == "running" && !dc.RunOnce {
			out = append(out, Restarted{Node: dn.Address, Component: dc.Name, Restarts: oc.RestartCount})
		}
	}
	return out
}

// nodeSteps are the steps of a reachable node of cluster.yml, in start
// order of the components. nodeMissing says that its Kubernetes Node is
// missing: a running kubelet that nothing else changes is restarted, since
// a kubelet registers its Node only when it starts.
func nodeSteps(dn *desired.Node, on *observe.Node, nodeMissing bool) []Step {
	var steps []Step
	changed, reason := changedFiles(dn, on)
	if len(changed) > 0 {
		steps = append(steps, Step{Node: dn.Address, Component: FilesComponent, Action: WriteFiles,
			Phase: PhaseFiles, Reason: reason, Files: changed})
	}
	for i := range dn.Containers {
		dc := &dn.Containers[i]
		s := Step{Node: dn.Address, Component: dc.Name, Phase: phaseOf(dc.Name), After: dc}
		oc, ok := on.Containers[dc.Name]
		switch {
		case !ok:
			s.Action, s.Reason = Create, reasonMissing
		case oc.RKE:
			s.Action, s.Reason = Replace, adoptReason(dc.Name)
		case oc.SpecHash != dc.Hash():
			s.Action, s.Reason = Replace, specReason(oc.Spec, dc.SpecJSON())
		case dc.RunOnce && (oc.State == "exited" || oc.State == "created" || oc.State == "running"):
			continue // it ran, or runs, as it should
		case oc.State == "restarting":
			s.Action, s.Reason = crashLoop(dc.Name, oc)
		case oc.State != "running":
			s.Action, s.Reason = Restart, stateReason(oc)
		case len(changed) > 0 && on.FilesRead && readsChanged(dc, changed, on):
			s.Action, s.Reason = Restart, "reads changed files"
		case reloadReason(dc, dn.Reload) != "":
			s.Action, s.Reason = Restart, reloadReason(dc, dn.Reload)
		case dc.Name == desired.Kubelet && nodeMissing && oc.State == "running":
			s.Action, s.Reason = Restart, ReasonNodeMissing
		default:
			continue
		}
		if ok {
			s.Before = &oc
		}
		steps = append(steps, s)
	}
	for _, name := range sortedNames(on.Containers) {
		if _, ok := dn.Container(name); ok {
			continue
		}
		oc := on.Containers[name]
		reason := notDesiredReason(dn, name)
		if oc.RKE {
			reason = adoptRemoveReason(name)
		}
		steps = append(steps, Step{
			Node: dn.Address, Component: name, Action: Remove, Phase: phaseOf(name),
			Reason: reason, Before: &oc,
		})
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return Rank(a.Component) - Rank(b.Component) })
	return steps
}

// nodeMissing reports whether the API server lists no Node for the
// machine at address (false when it was not asked).
func nodeMissing(o *observe.Cluster, address string) bool {
	k := o.Kubernetes
	return k != nil && k.Link != nil && slices.Contains(k.Link.Missing, address)
}

// notReady are the nodes of d whose Node is not Ready, in d's order.
func notReady(d *desired.Cluster, o *observe.Cluster) []string {
	k := o.Kubernetes
	if k == nil || k.Link == nil {
		return nil
	}
	var out []string
	for _, dn := range d.Nodes {
		if n := k.Link.Owned[dn.Address]; n != nil && observe.Ready(n) != string(corev1.ConditionTrue) {
			out = append(out, dn.Address)
		}
	}
	return out
}

// newEtcd reports whether the etcd phase's steps create every etcd member
// of d: no member runs yet, and they must start together.
func newEtcd(d *desired.Cluster, etcdSteps []Step) bool {
	members := 0
	for _, n := range d.Nodes {
		if _, ok := n.Container(desired.Etcd); ok {
			members++
		}
	}
	creates := 0
	for _, s := range etcdSteps {
		if s.Component == desired.Etcd && s.Action == Create {
			creates++
		}
	}
	return members > 0 && creates == members
}

// changedFiles returns the desired files of a node that are missing or
// differ, and why, naming at most a few of them.
func changedFiles(dn *desired.Node, on *observe.Node) ([]string, string) {
	var changed []string
	for p, b := range dn.Files {
		if !on.FilesRead || on.Files[p] != observe.FileHash(b) {
			changed = append(changed, p)
		}
	}
	if len(changed) == 0 {
		return nil, ""
	}
	slices.Sort(changed)
	if !on.FilesRead {
		return changed, "files not read from the node: writing all"
	}
	var missing, differ []string
	for _, p := range changed {
		if _, ok := on.Files[p]; ok {
			differ = append(differ, path.Base(p))
		} else {
			missing = append(missing, path.Base(p))
		}
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "missing: "+listSome(missing))
	}
	if len(differ) > 0 {
		parts = append(parts, "changed: "+listSome(differ))
	}
	return changed, strings.Join(parts, "; ")
}

// readsChanged reports whether the container reads one of the changed
// files that was on the node before (a file that is new is read when the
// container that needs it is created or replaced). A container names its
// files in its flags or environment.
func readsChanged(c *desired.Container, changed []string, on *observe.Node) bool {
	return reads(c, slices.DeleteFunc(slices.Clone(changed), func(p string) bool {
		_, existed := on.Files[p]
		return !existed
	}))
}

// reads reports whether the container reads one of the files (named in
// its flags or environment).
func reads(c *desired.Container, files []string) bool {
	for _, p := range files {
		for _, s := range slices.Concat(c.Args, c.Env) {
			if strings.Contains(s, p) {
				return true
			}
		}
	}
	return false
}

// reloadReason is why the container must read again one of the files of
// reload (path: why) it reads; "" when it reads none. Paths are taken in
// order, so the reason is the same from one plan to the next.
func reloadReason(c *desired.Container, reload map[string]string) string {
	for _, p := range slices.Sorted(maps.Keys(reload)) {
		if reads(c, []string{p}) {
			return reload[p]
		}
	}
	return ""
}

// listSome lists up to three names and how many more there are.
func listSome(names []string) string {
	const most = 3
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
}

// withMembership adds the membership changes of a running etcd cluster to
// the etcd phase's container steps: members to remove that are unhealthy
// first, each new member's AddMember right before its container is
// created, then the healthy members to remove, and last the removal of
// etcd containers from nodes that lost the role (their member is gone by
// then).
func withMembership(d *desired.Cluster, o *observe.Cluster, steps []Step) []Step {
	var want []etcdmember.Want
	for _, n := range d.Nodes {
		if _, ok := n.Container(desired.Etcd); ok {
			want = append(want, etcdmember.Want{Node: n.Address, Name: desired.EtcdMemberName(n.Hostname), PeerURL: desired.EtcdPeerURL(n.InternalAddress)})
		}
	}
	changes := etcdmember.Plan(o.Etcd.Members, want)
	removeStep := func(m etcdmember.Member) Step {
		reason := "member " + m.String() + " is of no etcd node of cluster.yml"
		if !m.Healthy {
			reason += " (unhealthy: " + oneLine(m.Error) + ")"
		}
		return Step{Node: peerHost(m), Component: EtcdMemberComponent, Action: RemoveMember, Phase: PhaseEtcd, Reason: reason, Member: &m}
	}
	// learners are the members of etcd nodes that an earlier apply added
	// as learners and did not promote (it stopped), by node: adding them
	// again resumes them (the executor finds them added, starts their
	// container as a joining member, and promotes them).
	learners := map[string]etcdmember.Member{}
	for _, w := range want {
		if m := etcdmember.Find(o.Etcd.Members, w.PeerURL); m != nil && m.IsLearner {
			learners[w.Node] = *m
		}
	}
	resume := func(w etcdmember.Want) Step {
		m := learners[w.Node]
		delete(learners, w.Node)
		return Step{Node: w.Node, Component: EtcdMemberComponent, Action: AddMember, Phase: PhaseEtcd,
			Reason: "added as a learner by an apply that stopped before it voted: joins, votes once it has caught up", Member: &m}
	}
	var out, containerRemovals []Step
	for _, m := range changes.RemoveFirst {
		out = append(out, removeStep(m))
	}
	for _, s := range steps {
		if s.Action == Remove {
			containerRemovals = append(containerRemovals, s)
			continue
		}
		if s.Action == Create {
			for _, w := range changes.Add {
				if w.Node == s.Node {
					out = append(out, Step{Node: s.Node, Component: EtcdMemberComponent, Action: AddMember, Phase: PhaseEtcd,
						Reason: "new etcd node: joins as a learner, votes once it has caught up",
						Member: &etcdmember.Member{Name: w.Name, PeerURLs: []string{w.PeerURL}, IsLearner: true}})
				}
			}
			for _, w := range want {
				if _, ok := learners[w.Node]; ok && w.Node == s.Node {
					out = append(out, resume(w))
				}
			}
		}
		out = append(out, s)
	}
	for _, w := range want {
		if _, ok := learners[w.Node]; ok {
			out = append(out, resume(w)) // its container runs: promoted
		}
	}
	for _, m := range changes.RemoveLast {
		out = append(out, removeStep(m))
	}
	return append(out, containerRemovals...)
}

// peerHost is the host of a member's first peer URL: the node's internal
// address, which names it in a plan.
func peerHost(m etcdmember.Member) string {
	if len(m.PeerURLs) == 0 {
		return m.Name
	}
	u, err := url.Parse(m.PeerURLs[0])
	if err != nil || u.Hostname() == "" {
		return m.PeerURLs[0]
	}
	return u.Hostname()
}

// notDesiredReason says why a container should not run on a node of
// cluster.yml, naming the role change when the component tells it.
func notDesiredReason(dn *desired.Node, name string) string {
	switch name {
	case desired.Etcd:
		if !dn.HasRole(spec.RoleEtcd) {
			return reasonNotDesired + ": role " + spec.RoleEtcd + " removed"
		}
	case desired.KubeAPIServer, desired.KubeControllerManager, desired.KubeScheduler:
		if !dn.HasRole(spec.RoleControlPlane) {
			return reasonNotDesired + ": role " + spec.RoleControlPlane + " removed"
		}
	case desired.NginxProxy:
		if dn.HasRole(spec.RoleControlPlane) {
			return reasonNotDesired + ": role " + spec.RoleControlPlane + " added, the API server is local"
		}
	}
	return reasonNotDesired
}

func stateReason(c observe.Container) string {
	switch c.State {
	case "":
		return "container not running"
	case "created":
		return "container created but never started"
	case "exited":
		if c.ExitCode != nil {
			return fmt.Sprintf("container exited with code %d", *c.ExitCode)
		}
		return "container exited"
	case "dead":
		return "container dead"
	}
	return "container " + c.State + ", not running"
}

// crashLoop is the step of a container Docker is restarting: it exited,
// and its restart policy starts it again, over and over. Its spec is the
// desired one, so the container is made anew from it (Replace: whatever
// was changed in the container behind rigger's back, as a memory limit
// set with docker update, goes), except etcd's, which is restarted: its
// data is on the node either way, and a replacement would first take a
// snapshot from a cluster whose member is down. When the cause is outside
// the container (a port in use, a broken file, a full disk), the executor
// finds it looping again after the step and fails with its last lines.
func crashLoop(component string, c observe.Container) (Action, string) {
	reason := "container restarting (crash loop)"
	var seen []string
	if c.ExitCode != nil {
		seen = append(seen, fmt.Sprintf("exited %d", *c.ExitCode))
	}
	if c.RestartCount > 0 {
		seen = append(seen, "restarted "+times(c.RestartCount))
	}
	if len(seen) > 0 {
		reason += ": " + strings.Join(seen, ", ")
	}
	if component == desired.Etcd {
		return Restart, reason
	}
	return Replace, reason
}

// times is "once", "twice", "n times".
func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// nodeError is why an observed node (nil when it was not observed) gave no
// containers.
func nodeError(on *observe.Node) string {
	switch {
	case on == nil:
		return errNotObserved
	case on.Error != "":
		return on.Error
	case on.Err != nil:
		return on.Err.Error()
	}
	return "not reachable"
}

func sortedNames(m map[string]observe.Container) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if r := Rank(a) - Rank(b); r != 0 {
			return r
		}
		return strings.Compare(a, b)
	})
	return names
}

// Rank is a component's place in start order (files first); components
// rigger does not know come last.
func Rank(name string) int {
	switch name {
	case FilesComponent:
		return -1
	case EtcdMemberComponent:
		return 0
	case desired.Etcd:
		return 0
	case desired.KubeAPIServer:
		return 1
	case desired.KubeControllerManager:
		return 2
	case desired.KubeScheduler:
		return 3
	case desired.NginxProxy:
		return 4
	case desired.ServiceSidekick:
		return 5
	case desired.Kubelet:
		return 6
	case desired.KubeProxy:
		return 7
	}
	return 8
}

// phaseOf is the phase of a component on a node of cluster.yml.
func phaseOf(name string) Phase {
	switch r := Rank(name); {
	case r == 0:
		return PhaseEtcd
	case r <= 3:
		return PhaseControlPlane
	}
	return PhaseWorker
}
