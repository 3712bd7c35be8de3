// Package decide decides a plan in one function over values, as CKE's
// DecideOps and terraform's plan do: Compute takes cluster.yml, what the
// state directory holds (State), one observation of the cluster, what the
// command line asked and the time, and returns the plan (Planned) with
// everything an apply then does, unchanged:
//
//   - the refusals that follow from what was observed (a downgrade, a
//     skipped minor, components newer than the API servers, etcd moved
//     where it does not go, objects an upgrade leaves unreadable, an
//     unsupported Docker);
//   - the cluster's PKI and where it comes from (pkisource.Resolve, also
//     given apart as Credentials, which the observation of etcd and the
//     Nodes needs first);
//   - the stage of each staged operation (package staged: a certificate
//     or CA rotation, certrotate; the secrets encryption key, secretsenc),
//     the files and restarts each asks of the nodes;
//   - the steps (plan.Compute), the unavailability budgets of the rolling
//     phases (plan.ResolveBudgets), the guard against a truncated
//     cluster.yml (plan.CheckRemovals), the refusal to remove the node
//     rigger itself runs on (plan.CheckSelfRemoval) and the Kubernetes
//     Nodes' changes (kubenode.Changes, stale Nodes deleted included).
//
// Compute does no I/O, takes no context, reads no clock and logs nothing:
// the scenario table (scenario_test.go) and the simulated-node benchmarks
// (package simnode) call it as package reconcile does. LoadState reads its
// records from the state directory, apart; CheckSpec makes the refusals
// that follow from cluster.yml alone, before anything is read.
package decide

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/staged"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// Input is everything a plan is decided from.
type Input struct {
	// Spec is cluster.yml, loaded and valid (spec.Load).
	Spec *spec.Cluster
	// StateDir names the state directory, in messages and status.
	StateDir string
	// State is what the state directory holds (LoadState); nil: nothing.
	State *State
	// Observed is one read of the cluster: the nodes, etcd's members, the
	// Nodes (package observe).
	Observed *observe.Cluster
	// Asked is what the command line asks of this plan.
	Asked Asked
	// Now is the time of the plan.
	Now time.Time
	// PKI is the plan's certificates when they were resolved already
	// (Credentials, with this Input): Compute resolves them when nil.
	PKI *pkisource.Resolved
	// Addons are the add-ons, as the API server would apply them.
	Addons Addons
}

// Asked is what the command line asks of a plan, besides cluster.yml.
type Asked struct {
	// Rotate is a certificate rotation asked for (rigger cert rotate):
	// carried out whatever the record of cluster.yml's
	// rotate_certificates says, which it leaves as it is.
	Rotate *pki.Rotation
	// RotateKey asks for a rotation of the generated secrets encryption
	// key (rigger encrypt rotate-key).
	RotateKey bool
	// AllowRemovals lets the plan remove more nodes than
	// rigger.max_removed_nodes allows (--allow-removals).
	AllowRemovals bool
	// IgnoreDockerVersion skips RKE's check of each node's Docker version
	// (--ignore-docker-version, as rke up's).
	IgnoreDockerVersion bool
}

// After is what the plan after pl, in the same apply, asks: the one-shot
// requests pl started are not asked again (the records go on with them).
func (a Asked) After(pl *Planned) Asked {
	if r := pl.rotation(); r != nil && r.Decision.Issue != nil && r.Decision.From == certrotate.FromCommandLine {
		a.Rotate = nil
	}
	if e := pl.encryption; e != nil && e.Starts {
		a.RotateKey = false
	}
	return a
}

// Addons are the add-ons cluster.yml asks for, as rendered, and what the
// API server said of applying them (a server-side dry run, which package
// reconcile asks for alongside the observation).
type Addons struct {
	Want []addons.Addon
	// Changes are what applying Want would change, and those removed from
	// cluster.yml; nil when the API server could not be asked. Health is
	// how the add-ons in the cluster are doing.
	Changes *addons.ChangeSet
	Health  []addons.Health
	// Err says why the add-ons could not be planned although the API
	// server answered (Changes is nil then).
	Err error
}

// Credentials resolves the plan's PKI from in (pkisource.Resolve): the
// first part of Compute, which package reconcile makes apart because
// observing etcd's members and the Nodes needs it.
func Credentials(in Input) (*pkisource.Resolved, error) {
	st := in.State
	if st == nil {
		st = &State{}
	}
	return pkisource.Resolve(pkisource.Input{StateDir: in.StateDir, Req: pki.RequestFor(in.Spec), State: st.PKI,
		Rotation: st.Rotation, Old: st.Old, New: st.New,
		AskedYML: certrotate.FromSpec(in.Spec.RotateCertificates), AskedCLI: in.Asked.Rotate, Now: in.Now}, in.Observed)
}

// Compute is the plan of in.Spec: the one place where a plan is decided,
// and a pure function of in. It refuses a cluster.yml that would move the
// nodes to an older Kubernetes minor version than they run
// (plan.CheckDowngrade) or their API servers more than one minor version
// up (plan.CheckSkippedMinor), components newer than the API servers
// (plan.CheckSkew), etcd moved where etcd does not go
// (plan.CheckEtcdUpgrade), objects etcd stores at API versions the
// upgraded API servers would not read (plan.CheckStoredAPIs), and, unless
// Asked.IgnoreDockerVersion, nodes whose Docker version RKE does not
// support (plan.CheckDocker). It then decides the PKI (Credentials), the
// stage of each staged operation from its record (operations), the files
// and restarts each node needs, the steps (plan.Compute), the budgets,
// the removal guard and the Nodes' changes. A plan it cannot make is an
// error; one that must not be applied is Planned.Blocked.
func Compute(in Input) (*Planned, error) {
	if in.State == nil {
		in.State = &State{}
	}
	c, o := in.Spec, in.Observed
	rp := in.PKI
	if rp == nil {
		var err error
		if rp, err = Credentials(in); err != nil {
			return nil, err
		}
	}
	d, err := desired.Build(c)
	if err != nil {
		return nil, stall.Stalls(stall.InvalidSpec, fmt.Errorf("build desired state: %w", err))
	}
	if err := check(c, d, o, in.Asked.IgnoreDockerVersion); err != nil {
		return nil, err
	}
	re, err := secretsenc.Decide(secretsenc.WantOf(c, in.StateDir, in.Asked.RotateKey, in.Now), in.State.Key, in.State.KeyRecord, o)
	if err != nil {
		return nil, err
	}
	ops := operations(rp, re)
	req := pki.RequestFor(c)
	for i := range d.Nodes {
		n := &d.Nodes[i]
		if n.Files, err = nodeFiles(c, req, rp.Set, re, n); err != nil {
			return nil, stall.Stalls(stall.InvalidSpec, err)
		}
		n.Reload = map[string]string{}
		for _, op := range ops {
			maps.Copy(n.Reload, op.Restarts(n))
		}
	}
	p := plan.Compute(d, o)
	budgets, err := plan.ResolveBudgets(d, p.UnreachableNodes(), c.UpgradeStrategy)
	if err != nil {
		return nil, err
	}
	pl := &Planned{
		Plan: p, Desired: d, Observed: o, Budgets: budgets,
		PKI: rp.Set, PKIChanges: rp.Changes, PKISource: rp.Source,
		Warnings: append(specWarnings(c), plan.StoredAPIWarnings(o)...), Staged: ops,
		Encryption: report.EncryptionOf(re, in.StateDir),
		Addons:     in.Addons.Changes, AddonHealth: in.Addons.Health, AddonsErr: in.Addons.Err, AddonsWant: in.Addons.Want,
		pki: rp, encryption: re, spec: c, ignoreDocker: in.Asked.IgnoreDockerVersion,
		removals:   plan.CheckRemovals(p, len(c.Nodes), c.Rigger.MaxRemovedNodes, in.Asked.AllowRemovals),
		membership: plan.CheckMembership(p, o),
		self:       plan.CheckSelfRemoval(p, o.Kubernetes),
	}
	if rp.Save {
		pl.SavePKI = rp.State
	}
	if k := o.Kubernetes; k != nil && k.Link != nil {
		pl.NodeChanges = kubenode.Changes(kubenode.Machines(c), k, c.Rigger.StaleNodes, pl.Unreachable())
	}
	return pl, nil
}

// operations are the staged operations a plan carries (package staged),
// in the order an apply ends their stages: the certificates' rotation,
// decided with the plan's PKI (pkisource.Resolve), and the generated
// secrets encryption key's (secretsenc.Decide; nil when cluster.yml asks
// for none). A new staged operation is a line here.
func operations(rp *pkisource.Resolved, re *secretsenc.Plan) []staged.Operation {
	var out []staged.Operation
	if rp.Rotation != nil {
		out = append(out, rp.Rotation)
	}
	if re != nil {
		out = append(out, re)
	}
	return out
}

// check makes the refusals of Compute that follow from cluster.yml (c, as
// d) and what was observed (o).
func check(c *spec.Cluster, d *desired.Cluster, o *observe.Cluster, ignoreDocker bool) error {
	for _, err := range []error{plan.CheckDowngrade(d, o), plan.CheckSkippedMinor(d, o), plan.CheckSkew(d), plan.CheckEtcdUpgrade(d, o)} {
		if err != nil {
			return stall.Stalls(stall.InvalidSpec, err)
		}
	}
	if err := plan.CheckStoredAPIs(o); err != nil {
		return err // retried: the objects are fixed in the cluster, not in cluster.yml
	}
	if err := plan.CheckDocker(c, o, ignoreDocker); err != nil {
		return stall.Stalls(stall.InvalidSpec, err)
	}
	return nil
}

// nodeFiles are the files a node gets: its certificates and kubeconfigs,
// and the configuration files its components read, with the generated
// secrets encryption configuration on controlplane nodes (enc, when set).
func nodeFiles(c *spec.Cluster, req pki.Request, set *pki.Set, enc *secretsenc.Plan, n *desired.Node) (map[string][]byte, error) {
	var pn pki.Node
	for _, r := range req.Nodes {
		if r.Address == n.Address {
			pn = r
		}
	}
	files, err := pki.NodeFiles(set, req, pn)
	if err != nil {
		return nil, err
	}
	conf, err := desired.ConfigFiles(c, n)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Address, err)
	}
	maps.Copy(files, conf)
	if enc != nil && n.HasRole(spec.RoleControlPlane) {
		files[desired.EncryptionConfigFile] = enc.File
	}
	return files, nil
}

// specWarnings are what cluster.yml is worth a word about in every plan:
// the etcd layout, and a kubernetes image set to another release than
// kubernetes_version (so that a plan that changes nothing says why).
func specWarnings(c *spec.Cluster) []string {
	var want []etcdmember.Want
	for _, n := range c.Nodes {
		if slices.Contains(n.Role, spec.RoleEtcd) {
			want = append(want, etcdmember.Want{Node: n.Address})
		}
	}
	out := etcdmember.Warnings(want)
	if msg, detail := spec.PinnedKubernetes(c); msg != "" {
		out = append(out, "system_images.kubernetes "+msg+". "+detail)
	}
	return out
}

// Teardown is the plan of the teardown of cluster c (rigger remove), from
// the nodes observed (o): every container of the cluster removed and
// rigger's files cleaned on every node.
func Teardown(c *spec.Cluster, o *observe.Cluster) *Planned {
	d := &desired.Cluster{Name: c.ClusterName, PrefixPath: c.PrefixPath}
	return &Planned{Plan: plan.Compute(d, o), Desired: d, Observed: o, Teardown: true}
}
