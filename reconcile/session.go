package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/transport"
	"github.com/rigger/rigger/transport/sshtun"
)

// Options are the settings of a Session.
type Options struct {
	// StateDir holds the cluster's PKI and records (package statedir). It
	// is never in git; when it is lost, the PKI is recovered from a
	// controlplane node.
	StateDir string
	// Log receives what operators need to know (recovered PKI, retries).
	Log *slog.Logger
	// Transport reaches the nodes; nil means SSH as cluster.yml says.
	Transport transport.Transport
	// Now gives the time (nil: time.Now).
	Now func() time.Time
}

// Session reconciles one cluster: it holds the cluster.yml, a transport to
// its nodes and the nodes of the last apply, nothing learnt from the nodes.
// Plan observes and computes a Planned value; Apply carries one out under
// the Lock the caller took. It is not safe for concurrent use.
type Session struct {
	c    *spec.Cluster
	opts Options
	tr   transport.Transport
	own  bool // the session made tr and closes it
	req  pki.Request
	// former are the nodes of the last apply gone from cluster.yml.
	former []spec.Node
}

// Open prepares a reconcile of c, which must be loaded and valid
// (spec.Load). It reads the state directory and connects to nothing yet.
// Its errors are *Error values (Classify): a damaged state file stalls, a
// state directory that cannot be read is retried.
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
		return nil, stalls(ReasonInvalidSpec, fmt.Errorf("prefix_path %q: rigger does not write files under a prefix path yet; remove prefix_path", c.PrefixPath))
	}
	last, err := loadNodes(opts.StateDir)
	if err != nil {
		return nil, stateErr(err)
	}
	s := &Session{c: c, opts: opts, tr: opts.Transport, req: pki.RequestFor(c), former: formerNodes(c, last)}
	if s.tr == nil {
		// The former nodes are reached as the last apply reached them.
		reach := *c
		reach.Nodes = slices.Concat(c.Nodes, s.former)
		cfg, err := SSHConfig(&reach, opts.Log)
		if err != nil {
			return nil, stalls(ReasonInvalidSpec, err)
		}
		tr, err := sshtun.New(cfg)
		if err != nil {
			return nil, stalls(ReasonInvalidSpec, err)
		}
		s.tr, s.own = tr, true
	}
	return s, nil
}

// Close closes the transport the session made.
func (s *Session) Close() error {
	if s.own {
		return s.tr.Close()
	}
	return nil
}

// Plan observes the cluster once (observe) and computes what must change
// for it to run what cluster.yml asks for (plan.Compute). It changes
// nothing, on the nodes or in the state directory.
func (s *Session) Plan(ctx context.Context) (*Planned, error) {
	d, err := desired.Build(s.c)
	if err != nil {
		return nil, stalls(ReasonInvalidSpec, fmt.Errorf("build desired state: %w", err))
	}
	o, rp, err := s.observe(ctx)
	if err != nil {
		return nil, err
	}
	for i := range d.Nodes {
		files, err := s.nodeFiles(rp.set, &d.Nodes[i])
		if err != nil {
			return nil, stalls(ReasonInvalidSpec, err)
		}
		d.Nodes[i].Files = files
	}
	pl := &Planned{
		Plan: plan.Compute(d, o), Desired: d, Observed: o,
		PKI: rp.set, PKIChanges: rp.changes, PKISource: rp.source, saveState: rp.save, newCA: rp.newCA,
		Warnings: etcdWarnings(s.c),
	}
	if k := o.Kubernetes; k != nil && k.Link != nil {
		pl.NodeChanges = kubenode.Changes(kubenode.Machines(s.c), k.Link, s.c.Rigger.StaleNodes)
	}
	return pl, nil
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
