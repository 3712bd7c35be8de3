package reconcile

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/execute"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/sshtun"
)

// Options are the settings of a Session.
type Options struct {
	// StateDir holds the cluster's PKI (mode 0700, files 0600). It is
	// never in git; when it is lost, the PKI is recovered from a
	// controlplane node.
	StateDir string
	// Log receives what operators need to know (recovered PKI, retries).
	Log *slog.Logger
	// Transport reaches the nodes; nil means SSH as cluster.yml says.
	Transport transport.Transport
	// Now gives the time (nil: time.Now).
	Now func() time.Time
}

// DefaultStateDir is where a cluster's state lives unless told otherwise:
// $XDG_STATE_HOME/rigger/<cluster_name>, or ~/.local/state/rigger/<cluster_name>.
func DefaultStateDir(clusterName string) (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the state directory: %w: give --state-dir", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "rigger", clusterName), nil
}

// Session is one reconcile of one cluster: a transport to its nodes and
// what was learnt from them. It is not safe for concurrent use.
type Session struct {
	c    *spec.Cluster
	opts Options
	tr   transport.Transport
	own  bool // the session made tr and closes it
	req  pki.Request
	// former are the nodes of the last apply gone from cluster.yml.
	former []spec.Node
	// unlock releases the cluster's lock (Lock); nil when not held.
	unlock func()
	// lockAs and lockWait are Lock's command and wait, for the Lease
	// Apply takes.
	lockAs   string
	lockWait bool
}

// Open prepares a reconcile of c, which must be loaded and valid
// (spec.Load). It connects to nothing yet.
func Open(c *spec.Cluster, opts Options) (*Session, error) {
	if opts.StateDir == "" {
		return nil, errors.New("open cluster: no state directory given")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if p := strings.TrimSuffix(c.PrefixPath, "/"); p != "" {
		return nil, fmt.Errorf("prefix_path %q: rigger does not write files under a prefix path yet; remove prefix_path", c.PrefixPath)
	}
	last, err := loadNodes(opts.StateDir)
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, opts: opts, tr: opts.Transport, req: pki.RequestFor(c), former: formerNodes(c, last)}
	if s.tr == nil {
		// The former nodes are reached as the last apply reached them.
		reach := *c
		reach.Nodes = slices.Concat(c.Nodes, s.former)
		cfg, err := SSHConfig(&reach, opts.Log)
		if err != nil {
			return nil, err
		}
		tr, err := sshtun.New(cfg)
		if err != nil {
			return nil, err
		}
		s.tr, s.own = tr, true
	}
	return s, nil
}

// Close releases the cluster's lock if the session holds it and closes
// the transport the session made.
func (s *Session) Close() error {
	if s.unlock != nil {
		s.unlock()
	}
	if s.own {
		return s.tr.Close()
	}
	return nil
}

// Planned is a plan with everything it was computed from.
type Planned struct {
	Plan     *plan.Plan
	Desired  *desired.Cluster
	Observed *observe.Cluster
	// PKI is the certificate set the desired files hold.
	PKI *pki.Set
	// PKIChanges are the certificates issued or reissued for this plan.
	PKIChanges []pki.Change
	// PKISource says where the PKI came from: the state directory, a node
	// it was recovered from, or new.
	PKISource string
	// Warnings are what the cluster's layout is worth a word about (an
	// even number of etcd members).
	Warnings []string
	// NodeChanges are what the Kubernetes Nodes need besides the steps
	// (labels, taints, stale Nodes; package kubenode): Apply makes them
	// also when the plan has no step.
	NodeChanges []kubenode.Pending
	// NotReady are the nodes of cluster.yml whose Node is not Ready, in
	// cluster.yml order (kubenode.NotReady): changing them first costs no
	// availability.
	NotReady []string
	// Nodes are the Kubernetes Nodes as the API server listed them, and
	// Link which machine owns which; NodesErr says why they could not be
	// listed (then both are empty).
	Nodes    []corev1.Node
	Link     *kubenode.Linkage
	NodesErr error
	// newCA says why this plan's new CA must not be applied (nodes that may
	// hold the real one did not answer); nil when it may.
	newCA error
	// saveState is set when the state directory must be written before
	// the plan is applied (new, recovered or changed PKI).
	saveState bool
}

// Blocked says why the plan must not be applied (a new CA while nodes that
// may hold the cluster's did not answer); nil when it may be.
func (p *Planned) Blocked() error { return p.newCA }

// Plan observes the nodes and computes what must change for them to run
// what cluster.yml asks for. It changes nothing, on the nodes or in the
// state directory.
func (s *Session) Plan(ctx context.Context) (*Planned, error) {
	d, err := desired.Build(s.c)
	if err != nil {
		return nil, fmt.Errorf("build desired state: %w", err)
	}
	o := s.observe(ctx)
	rp, err := s.resolvePKI(ctx, o)
	if err != nil {
		return nil, err
	}
	set := rp.set
	s.observeEtcd(ctx, set, o)
	for i := range d.Nodes {
		files, err := s.nodeFiles(set, &d.Nodes[i])
		if err != nil {
			return nil, err
		}
		d.Nodes[i].Files = files
	}
	pl := &Planned{
		Plan: plan.Compute(d, o), Desired: d, Observed: o,
		PKI: set, PKIChanges: rp.changes, PKISource: rp.source, saveState: rp.save, newCA: rp.newCA,
		Warnings: etcdWarnings(s.c),
	}
	// kubenode: a node whose Node was deleted gets its kubelet restarted;
	// labels, taints and stale Nodes to change.
	s.planNodes(ctx, pl)
	return pl, nil
}

// observe reads the nodes of cluster.yml and those of the last apply that
// left it (rigger keeps no other inventory of removed nodes).
func (s *Session) observe(ctx context.Context) *observe.Cluster {
	addrs := make([]string, 0, len(s.c.Nodes)+len(s.former))
	for _, n := range slices.Concat(s.c.Nodes, s.former) {
		addrs = append(addrs, n.Address)
	}
	return observe.Observe(ctx, s.tr, observe.Request{
		Cluster: s.c.ClusterName, Nodes: addrs, MaxParallel: s.c.Rigger.MaxParallel,
		FilesImage: s.c.SystemImages.Alpine, FilesDir: desired.KubernetesDir, Now: s.opts.Now,
	})
}

// recordNodes saves, before anything changes, the nodes an apply touches:
// cluster.yml's and the former ones not cleaned yet.
func (s *Session) recordNodes() error {
	return saveNodes(s.opts.StateDir, slices.Concat(s.c.Nodes, s.former))
}

// forgetNodes drops from the record the former nodes that were cleaned.
func (s *Session) forgetNodes(cleaned []string) error {
	keep := slices.DeleteFunc(slices.Clone(s.former), func(n spec.Node) bool { return slices.Contains(cleaned, n.Address) })
	if err := saveNodes(s.opts.StateDir, slices.Concat(s.c.Nodes, keep)); err != nil {
		return err
	}
	s.former = keep
	return nil
}

// nodeFiles are the files a node gets: its certificates and kubeconfigs,
// and the configuration files its components read.
func (s *Session) nodeFiles(set *pki.Set, n *desired.Node) (map[string][]byte, error) {
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
	return files, nil
}

// resolvedPKI is the cluster's PKI for a plan and where it came from.
type resolvedPKI struct {
	set     *pki.Set
	changes []pki.Change
	source  string
	// save is set when the state directory must be written before apply.
	save bool
	// newCA, when set, says why the new CA must not be applied.
	newCA error
}

// resolvePKI finds the cluster's PKI: the state directory's, or, when that
// is lost, a controlplane node's. Only a cluster with no trace on any node
// gets a new CA. The PKI found is then completed (pki.Ensure).
func (s *Session) resolvePKI(ctx context.Context, o *observe.Cluster) (*resolvedPKI, error) {
	r := &resolvedPKI{}
	existing, err := pki.Load(s.opts.StateDir)
	var nf *pki.NotFoundError
	switch {
	case err == nil:
		r.source = "state directory " + s.opts.StateDir
		if err := s.checkSameCA(existing, o); err != nil {
			return nil, err
		}
	case errors.As(err, &nf):
		var newCA *NewCAError
		existing, r.source, err = s.recoverPKI(ctx, o)
		switch {
		case errors.As(err, &newCA):
			// A plan may show what a new CA would change; Apply refuses.
			r.source, r.newCA = "new, for this plan only: "+err.Error(), err
		case err != nil:
			return nil, err
		default:
			r.save = true
		}
	default:
		return nil, err
	}
	if r.set, r.changes, err = pki.Ensure(existing, s.req, s.opts.Now()); err != nil {
		return nil, err
	}
	r.save = r.save || len(r.changes) > 0
	return r, nil
}

// caPath is the CA certificate on every node.
var caPath, caKeyPath = pki.NodePath(pki.CACertName)

// checkSameCA refuses a state directory whose CA is not the one the nodes
// trust: applying it would break every component's TLS.
func (s *Session) checkSameCA(set *pki.Set, o *observe.Cluster) error {
	want := observe.FileHash(set.Certs[pki.CACertName].CertPEM)
	for _, a := range sortedAddrs(o) {
		n := o.Nodes[a]
		if got, ok := n.Files[caPath]; ok && got != want {
			return fmt.Errorf("the CA in state directory %s is not the CA of node %s (%s differs): "+
				"the state directory belongs to another cluster; give the right --state-dir, "+
				"or move this one away and rigger recovers the PKI from a controlplane node", s.opts.StateDir, a, caPath)
		}
	}
	return nil
}

// recoverPKI reads the PKI from the first reachable controlplane node that
// has the CA key; without one, the cluster must have no trace on any node
// to get a new PKI.
func (s *Session) recoverPKI(ctx context.Context, o *observe.Cluster) (*pki.Set, string, error) {
	var tried []string
	for _, a := range sortedAddrs(o) {
		n := o.Nodes[a]
		if !n.Reachable || n.Files[caKeyPath] == "" {
			continue
		}
		e, err := s.tr.Docker(ctx, a)
		if err == nil {
			var files map[string][]byte
			files, err = dockerop.ReadDir(ctx, e, a, s.c.SystemImages.Alpine, strings.TrimSuffix(pki.NodeDir, "/"))
			if err == nil {
				var set *pki.Set
				if set, err = pki.FromFiles(files); err == nil {
					s.opts.Log.Warn("state directory had no certificates: recovered the PKI from a node",
						"cluster", s.c.ClusterName, "node", a, "state_dir", s.opts.StateDir)
					return set, "recovered from node " + a + " (the state directory had none)", nil
				}
			}
		}
		tried = append(tried, fmt.Sprintf("%s: %v", a, err))
	}
	var traces, unreachable []string
	for _, a := range sortedAddrs(o) {
		n := o.Nodes[a]
		switch {
		case !n.Reachable:
			unreachable = append(unreachable, a)
		case len(n.Containers) > 0 || n.Files[caPath] != "":
			traces = append(traces, a)
		}
	}
	if len(traces) > 0 || len(tried) > 0 {
		msg := fmt.Sprintf("the state directory %s has no certificates, and none could be recovered from the nodes", s.opts.StateDir)
		if len(tried) > 0 {
			msg += " (" + strings.Join(tried, "; ") + ")"
		}
		return nil, "", fmt.Errorf("%s, but nodes %s run this cluster: rigger will not make a new CA for an existing cluster; "+
			"restore the state directory, or bring a controlplane node with /etc/kubernetes/ssl back", msg, strings.Join(traces, ", "))
	}
	if len(unreachable) > 0 {
		return nil, "", &NewCAError{StateDir: s.opts.StateDir, Unreachable: unreachable}
	}
	return nil, "new (no node runs this cluster yet)", nil
}

// NewCAError is a cluster without certificates anywhere rigger could look
// while some of its nodes did not answer: they may hold the CA. A plan
// shows what a new CA would change; apply refuses to make one.
type NewCAError struct {
	StateDir    string
	Unreachable []string
}

func (e *NewCAError) Error() string {
	return fmt.Sprintf("the state directory %s has no certificates and nodes %s did not answer: "+
		"rigger makes a new CA only when every node answers and none runs this cluster; try again when they answer",
		e.StateDir, strings.Join(e.Unreachable, ", "))
}

func sortedAddrs(o *observe.Cluster) []string {
	out := make([]string, 0, len(o.Nodes))
	for a := range o.Nodes {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// ApplyOptions are the choices of one apply.
type ApplyOptions struct {
	Hooks execute.Hooks
	// AllowRemovals lets an apply remove more nodes than
	// rigger.max_removed_nodes allows.
	AllowRemovals bool
}

// Apply carries out a plan from Plan: it saves the PKI to the state
// directory first (so that a crash never leaves nodes with certificates
// rigger does not have), then runs the plan (execute.Run), and records the
// cluster's nodes for the next plan.
func (s *Session) Apply(ctx context.Context, pl *Planned, ao ApplyOptions) (*execute.Result, error) {
	if pl.newCA != nil {
		return &execute.Result{NotRun: pl.Plan.Steps}, pl.newCA
	}
	if err := s.checkRemovals(pl.Plan, ao.AllowRemovals); err != nil {
		return &execute.Result{NotRun: pl.Plan.Steps}, err
	}
	unlease, err := s.leaseCluster(ctx, pl)
	if err != nil {
		return &execute.Result{NotRun: pl.Plan.Steps}, err
	}
	defer unlease()
	if pl.saveState {
		if err := pki.Save(s.opts.StateDir, pl.PKI); err != nil {
			return &execute.Result{NotRun: pl.Plan.Steps}, fmt.Errorf("save certificates before applying: %w", err)
		}
		pl.saveState = false
	}
	if err := s.recordNodes(); err != nil {
		return &execute.Result{NotRun: pl.Plan.Steps}, err
	}
	chk, err := s.checker(pl.PKI)
	if err != nil {
		return &execute.Result{NotRun: pl.Plan.Steps}, err
	}
	workerBatch, workersBlocked, err := s.unavailability(pl, spec.RoleWorker, s.c.UpgradeStrategy.MaxUnavailableWorker, "max_unavailable_worker")
	if err != nil {
		return &execute.Result{NotRun: pl.Plan.Steps}, err
	}
	_, cpBlocked, err := s.unavailability(pl, spec.RoleControlPlane, s.c.UpgradeStrategy.MaxUnavailableControlplane, "max_unavailable_controlplane")
	if err != nil {
		return &execute.Result{NotRun: pl.Plan.Steps}, err
	}
	// kubenode: cordon, drain, Node Ready, labels, taints, stale Nodes.
	side, hooks := s.kubeSide(pl, ao.Hooks)
	res, err := execute.Run(ctx, pl.Plan, execute.Options{
		Desired: pl.Desired,
		Nodes: func(ctx context.Context, node string) (dockerop.Engine, error) {
			return s.tr.Docker(ctx, node)
		},
		Health:               chk,
		Hooks:                hooks,
		First:                pl.NotReady,
		BeforeNode:           side.beforeNode,
		AfterNode:            side.afterNode,
		HelperImage:          s.c.SystemImages.Alpine,
		MaxParallel:          s.c.Rigger.MaxParallel,
		MaxUnavailableWorker: workerBatch,
		WorkersBlocked:       workersBlocked,
		ControlPlaneBlocked:  cpBlocked,
		MaxPlanAge:           MaxPlanAge,
		Now:                  s.opts.Now,
		BeforeEtcdChange: func(ctx context.Context) error {
			res, err := s.SaveSnapshot(ctx, SnapshotOptions{Kind: etcdsnap.KindBeforeChange})
			if res == nil || res.Sidecar == nil {
				return err
			}
			if err != nil {
				// Taken and verified on one member at least: enough to go on.
				s.opts.Log.Warn("snapshot before the etcd change taken, not everywhere", "cluster", s.c.ClusterName,
					"snapshot", res.Sidecar.Name, "error", err)
			}
			return nil
		},
		Etcd: func(ctx context.Context) (execute.Membership, error) {
			return s.etcdClient(ctx, pl.PKI, pl.Observed)
		},
		Kubernetes: side.kubernetes,
	})
	if err == nil {
		// kubenode: labels, taints and stale Nodes, also after an empty plan.
		err = side.reconcile(ctx)
	}
	if err == nil {
		// The removed nodes are clean: the next plan need not look.
		err = s.forgetNodes(pl.Plan.RemovedNodes)
	}
	return res, err
}

// unavailability resolves an upgrade_strategy budget for the nodes with
// role: the nodes that may change at once, the budget less those already
// unavailable (unreachable, or NotReady and not about to change). When
// nothing is left, the phase is blocked with the reason.
func (s *Session) unavailability(pl *Planned, role, value, key string) (batch int, blocked error, err error) {
	total := 0
	var down []string
	unreachable := map[string]bool{}
	for _, u := range pl.Plan.Unreachable {
		unreachable[u.Node] = true
	}
	for _, n := range pl.Desired.Nodes {
		if !slices.Contains(n.Roles, role) {
			continue
		}
		total++
		if unreachable[n.Address] {
			down = append(down, n.Address)
		}
	}
	budget, err := spec.ParseBudget(value, 1)
	if err != nil {
		return 0, nil, fmt.Errorf("upgrade_strategy.%s: %w", key, err)
	}
	most := budget.Of(total, 1)
	if batch = most - len(down); batch < 1 {
		return 0, fmt.Errorf("upgrade_strategy.%s allows %d of the %d %s nodes to be unavailable, and %d are already (%s): "+
			"nothing more changes there until they answer; or raise the budget", key, most, total, role, len(down), strings.Join(down, ", ")), nil
	}
	return batch, nil, nil
}

// MaxPlanAge is how old an observation Apply acts on may be.
const MaxPlanAge = 15 * time.Minute

// checker probes components with the kube-node certificate, which etcd and
// the API server accept.
func (s *Session) checker(set *pki.Set) (*health.Checker, error) {
	node := set.Certs[pki.KubeNodeCertName]
	cert, err := tls.X509KeyPair(node.CertPEM, node.KeyPEM)
	if err != nil {
		return nil, fmt.Errorf("load the kube-node certificate for health checks: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(set.Certs[pki.CACertName].CertPEM)
	return &health.Checker{Dial: s.tr.Dial, ClientCert: cert, CA: pool}, nil
}

// checkRemovals is the guard against a truncated cluster.yml: removing
// more nodes than rigger.max_removed_nodes allows needs AllowRemovals.
func (s *Session) checkRemovals(p *plan.Plan, allow bool) error {
	removed := slices.Clone(p.RemovedNodes)
	for _, u := range p.Unreachable {
		if u.Removed {
			removed = append(removed, u.Node)
		}
	}
	if len(removed) == 0 || allow {
		return nil
	}
	budget, err := spec.ParseBudget(s.c.Rigger.MaxRemovedNodes, 0)
	if err != nil {
		return fmt.Errorf("rigger.max_removed_nodes: %w", err)
	}
	total := len(s.c.Nodes) + len(removed)
	if most := budget.Of(total, 0); len(removed) > most {
		return &RemovalGuardError{Removed: removed, Total: total, Limit: s.c.Rigger.MaxRemovedNodes}
	}
	return nil
}

// RemovalGuardError is a plan that removes more nodes than
// rigger.max_removed_nodes allows: a guard against a truncated cluster.yml.
type RemovalGuardError struct {
	// Removed are the addresses of the nodes the plan removes.
	Removed []string
	// Total is how many nodes rigger knows, the removed ones included.
	Total int
	// Limit is rigger.max_removed_nodes.
	Limit string
}

func (e *RemovalGuardError) Error() string {
	return fmt.Sprintf("the plan removes %d of %d nodes (%s), more than rigger.max_removed_nodes (%s) allows: "+
		"if cluster.yml is complete and this is meant, apply with --allow-removals (or raise rigger.max_removed_nodes)",
		len(e.Removed), e.Total, strings.Join(e.Removed, ", "), e.Limit)
}

// PlanRemove observes the nodes and plans the teardown of the cluster:
// every container of the cluster removed and rigger's files cleaned on
// every node of cluster.yml and of the last apply.
func (s *Session) PlanRemove(ctx context.Context) (*Planned, error) {
	o := s.observe(ctx)
	return &Planned{Plan: plan.Compute(&desired.Cluster{Name: s.c.ClusterName}, o), Desired: &desired.Cluster{Name: s.c.ClusterName}, Observed: o}, nil
}

// Remove carries out a plan from PlanRemove. The state directory is kept:
// the certificates are still those of any node that did not answer.
func (s *Session) Remove(ctx context.Context, pl *Planned, hooks execute.Hooks) (*execute.Result, error) {
	res, err := execute.Run(ctx, pl.Plan, execute.Options{
		Desired: pl.Desired,
		Nodes: func(ctx context.Context, node string) (dockerop.Engine, error) {
			return s.tr.Docker(ctx, node)
		},
		Hooks:       hooks,
		HelperImage: s.c.SystemImages.Alpine,
		MaxParallel: s.c.Rigger.MaxParallel,
		MaxPlanAge:  MaxPlanAge,
		Now:         s.opts.Now,
	})
	if err == nil {
		err = s.forgetNodes(pl.Plan.RemovedNodes)
	}
	return res, err
}

// Kubeconfig returns the admin kubeconfig: the API server of the first
// controlplane node, with the kube-admin certificate, from PKI.
func (s *Session) Kubeconfig(ctx context.Context) ([]byte, error) {
	set, err := s.PKI(ctx)
	if err != nil {
		return nil, err
	}
	return pki.AdminKubeconfig(set, s.req)
}

// PKI returns the cluster's certificates as they are: those of the state
// directory or, when it has none, those of a controlplane node (then saved
// to the state directory). It never makes or reissues any: a cluster that
// no node runs yet is an error that says to apply first.
func (s *Session) PKI(ctx context.Context) (*pki.Set, error) {
	set, err := pki.Load(s.opts.StateDir)
	var nf *pki.NotFoundError
	if errors.As(err, &nf) {
		var source string
		set, source, err = s.recoverPKI(ctx, s.observe(ctx))
		if err == nil && set == nil {
			return nil, fmt.Errorf("no certificates for cluster %s: the state directory %s has none and no node runs the cluster (%s): run rigger apply first",
				s.c.ClusterName, s.opts.StateDir, source)
		}
		if err == nil {
			err = pki.Save(s.opts.StateDir, set)
		}
	}
	if err != nil {
		return nil, err
	}
	return set, nil
}
