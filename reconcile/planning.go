package reconcile

import (
	"context"
	"fmt"
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
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// Plan observes the cluster once (observe) and computes what must change
// for it to run what cluster.yml asks for (compute, then the add-ons'
// server-side dry run). It changes nothing, on the nodes or in the state
// directory.
func (s *Session) Plan(ctx context.Context) (*Planned, error) {
	return s.plan(ctx, asked{rotate: s.opts.Rotate, rotateKey: s.opts.RotateKey})
}

// asked are the command line's one-shot requests (Options.Rotate,
// Options.RotateKey): a plan starts them, and the plans after it in the
// same apply go on from the records, without asking again.
type asked struct {
	rotate    *pki.Rotation
	rotateKey bool
}

// after is what the plan after pl asks: what pl started is not asked again.
func (a asked) after(pl *Planned) asked {
	if r := pl.rotation(); r != nil && r.Decision.Issue != nil && r.Decision.From == certrotate.FromCommandLine {
		a.rotate = nil
	}
	if e := pl.encryption; e != nil && e.Starts {
		a.rotateKey = false
	}
	return a
}

// plan is Plan with the command line's requests a.
func (s *Session) plan(ctx context.Context, a asked) (*Planned, error) {
	if s.opts.Teardown {
		return s.planTeardown(ctx), nil
	}
	tl := s.opts.Timeline
	end := tl.Begin("plan: read the state directory")
	st, err := s.loadState()
	end()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	o, rp, err := s.observe(ctx, st, a, st.recovers)
	if err != nil {
		return nil, err
	}
	// The rest is read at once: etcd's members (and what an upgrade would
	// leave unreadable), and the Nodes, then the add-ons' dry run.
	var (
		ad        plannedAddons
		etcdTook  time.Duration
		addonsErr error
	)
	began := time.Now()
	s.observeWithPKI(ctx, rp.Set, o, func(ctx context.Context) {
		s.observeStoredAPIs(ctx, rp.Set, o)
		etcdTook = time.Since(began)
	}, func(ctx context.Context) {
		ad, addonsErr = s.planAllAddons(ctx, rp.Set, o)
	})
	observed := time.Now()
	end = tl.Begin("plan: compute")
	pl, err := s.compute(st, o, rp, a)
	end()
	if err != nil {
		return nil, err
	}
	if addonsErr != nil {
		return nil, addonsErr
	}
	pl.addons, pl.Addons, pl.AddonHealth, pl.AddonsErr = ad.want, ad.changes, ad.health, ad.err
	s.opts.Log.Debug("planned", "cluster", s.c.ClusterName, "observe", observed.Sub(start).Round(time.Millisecond),
		"etcd", etcdTook.Round(time.Millisecond), "addons", ad.took.Round(time.Millisecond))
	return pl, nil
}

// plannedAddons is what planAllAddons found.
type plannedAddons struct {
	want    []addons.Addon
	changes *addons.ChangeSet
	health  []addons.Health
	// err is the API server failing a call of the dry run (etcd electing
	// a leader, say): the add-ons stay unplanned, as when it does not
	// answer.
	err  error
	took time.Duration
}

// planAllAddons renders the add-ons and, when the API server listed the
// Nodes (o), asks it what applying them would change (planAddons). Its
// error is one that refuses the plan: add-ons that do not render or that
// the API server finds invalid.
func (s *Session) planAllAddons(ctx context.Context, set *pki.Set, o *observe.Cluster) (plannedAddons, error) {
	tl := s.opts.Timeline
	began := time.Now()
	end := tl.Begin("plan: render the add-ons")
	want, err := s.desiredAddons(ctx)
	end()
	if err != nil {
		return plannedAddons{}, err
	}
	ad := plannedAddons{want: want}
	if k := o.Kubernetes; k != nil && k.Err == nil {
		end = tl.Begin("plan: add-ons' server-side dry run")
		ad.changes, ad.health, ad.err = s.planAddons(ctx, set, o, want)
		end()
		if _, stalled := Classify(ad.err); stalled {
			return plannedAddons{}, ad.err
		}
	}
	ad.took = time.Since(began)
	return ad, nil
}

// compute is the plan of cluster.yml from what the state directory holds
// (st), what was observed (o), the PKI resolved from both (rp) and what
// the command line asks (a): the one
// place where a plan is decided, and a pure function of its arguments. It
// decides the stage of each staged operation from its record (the CA
// rotation's through rp, the secrets encryption key's through
// secretsenc.Decide), the files and restarts each node needs for it, and
// the steps (plan.Compute). It refuses a cluster.yml that would move the
// nodes to an older Kubernetes minor version than they run
// (plan.CheckDowngrade) or their API servers more than one minor version
// up (plan.CheckSkippedMinor), components newer than the API servers
// (plan.CheckSkew), etcd moved where etcd does not go
// (plan.CheckEtcdUpgrade), objects etcd stores at API versions the
// upgraded API servers would not read (plan.CheckStoredAPIs), and, unless Options.IgnoreDockerVersion,
// nodes whose Docker version RKE does not support (plan.CheckDocker).
func (s *Session) compute(st *state, o *observe.Cluster, rp *pkisource.Resolved, a asked) (*Planned, error) {
	d, err := desired.Build(s.c)
	if err != nil {
		return nil, stall.Stalls(ReasonInvalidSpec, fmt.Errorf("build desired state: %w", err))
	}
	if err := plan.CheckDowngrade(d, o); err != nil {
		return nil, stall.Stalls(ReasonInvalidSpec, err)
	}
	if err := plan.CheckSkippedMinor(d, o); err != nil {
		return nil, stall.Stalls(ReasonInvalidSpec, err)
	}
	if err := plan.CheckSkew(d); err != nil {
		return nil, stall.Stalls(ReasonInvalidSpec, err)
	}
	if err := plan.CheckEtcdUpgrade(d, o); err != nil {
		return nil, stall.Stalls(ReasonInvalidSpec, err)
	}
	if err := plan.CheckStoredAPIs(o); err != nil {
		return nil, err // retried: the objects are fixed in the cluster, not in cluster.yml
	}
	if err := plan.CheckDocker(s.c, o, s.opts.IgnoreDockerVersion); err != nil {
		return nil, stall.Stalls(ReasonInvalidSpec, err)
	}
	re, err := secretsenc.Decide(secretsenc.WantOf(s.c, s.opts.StateDir, a.rotateKey, s.opts.Now()), st.key, st.keyRecord, o)
	if err != nil {
		return nil, err
	}
	if re != nil && re.Source == secretsenc.SourceRecovered {
		s.opts.Log.Warn("state directory had no secrets encryption key: recovered it from a node",
			"cluster", s.c.ClusterName, "node", re.From, "keys", re.Cur.Names(), "state_dir", s.opts.StateDir)
	}
	for i := range d.Nodes {
		files, err := s.nodeFiles(rp.Set, re, &d.Nodes[i])
		if err != nil {
			return nil, stall.Stalls(ReasonInvalidSpec, err)
		}
		d.Nodes[i].Files = files
		d.Nodes[i].Reload = map[string]string{}
		for _, p := range rp.Rotation.Reload(files, rp.Set) {
			d.Nodes[i].Reload[p] = plan.ReasonRotation
		}
		if why := re.Reload(); why != "" && d.Nodes[i].HasRole(spec.RoleControlPlane) {
			d.Nodes[i].Reload[desired.EncryptionConfigFile] = why
		}
	}
	pl := &Planned{
		Plan: plan.Compute(d, o), Desired: d, Observed: o,
		PKI: rp.Set, PKIChanges: rp.Changes, PKISource: rp.Source, pki: rp,
		Warnings: etcdWarnings(s.c), encryption: re, Encryption: report.EncryptionOf(re, s.opts.StateDir),
		spec: s.c, ignoreDocker: s.opts.IgnoreDockerVersion,
	}
	if k := o.Kubernetes; k != nil && k.Link != nil {
		pl.NodeChanges = kubenode.Changes(kubenode.Machines(s.c), k.Link, s.c.Rigger.StaleNodes, pl.Unreachable())
	}
	return pl, nil
}

// observe reads, once, the nodes (of cluster.yml and those the last apply
// left; keep keeps their files' contents) and resolves the cluster's PKI
// (the state directory's, or recovered from a node); observeWithPKI then
// reads, with that PKI, the etcd membership and the Nodes the API server
// lists into the same value. What could not be read is recorded in it.
// Every plan, status and doctor reads the cluster so. On an error, the
// nodes were read (o is set) and the PKI was not.
func (s *Session) observe(ctx context.Context, st *state, a asked, keep bool) (*observe.Cluster, *pkisource.Resolved, error) {
	tl := s.opts.Timeline
	start := time.Now()
	end := tl.Begin("observe the nodes")
	o := s.observeNodes(ctx, keep, s.sinceApplied(st))
	end()
	nodes := time.Now()
	end = tl.Begin("plan: resolve the PKI")
	rp, err := s.resolvePKI(st, o, a)
	end()
	if err != nil {
		return o, nil, err
	}
	s.opts.Log.Debug("observed", "cluster", s.c.ClusterName, "nodes", nodes.Sub(start).Round(time.Millisecond),
		"pki", time.Since(nodes).Round(time.Millisecond))
	return o, rp, nil
}

// nodeFiles are the files a node gets: its certificates and kubeconfigs,
// and the configuration files its components read, with the generated
// secrets encryption configuration on controlplane nodes (enc, when set).
func (s *Session) nodeFiles(set *pki.Set, enc *secretsenc.Plan, n *desired.Node) (map[string][]byte, error) {
	var pn pki.Node
	for _, r := range s.req.Nodes {
		if r.Address == n.Address {
			pn = r
		}
	}
	files, err := pki.NodeFiles(set, s.req, pn)
	if err != nil {
		return nil, err
	}
	conf, err := desired.ConfigFiles(s.c, n)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Address, err)
	}
	for p, b := range conf {
		files[p] = b
	}
	if enc != nil && n.HasRole(spec.RoleControlPlane) {
		files[desired.EncryptionConfigFile] = enc.File
	}
	return files, nil
}

// etcdWarnings are what the cluster's etcd layout is worth a word about.
func etcdWarnings(c *spec.Cluster) []string {
	var want []etcdmember.Want
	for _, n := range c.Nodes {
		if slices.Contains(n.Role, spec.RoleEtcd) {
			want = append(want, etcdmember.Want{Node: n.Address})
		}
	}
	return etcdmember.Warnings(want)
}
