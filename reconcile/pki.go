package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
)

// resolvedPKI is the cluster's PKI for a plan and where it came from.
type resolvedPKI struct {
	set     *pki.Set
	changes []pki.Change
	source  PKISource
	// save is set when the state directory must be written before apply.
	save bool
	// newCA, when set, says why the new CA must not be applied.
	newCA error
	// state is what the state directory's PKI must be when save is set:
	// set, but for a CA rotation (the old generation until it is done).
	state *pki.Set
	// rot is what the plan does about certificate rotation.
	rot *rotationState
}

// resolvePKI finds the cluster's PKI from what was observed of the nodes:
// the state directory's, or, when that is lost, a controlplane node's.
// Only a cluster with no trace on any node gets a new CA. The PKI found is
// then completed (pki.Ensure).
func (s *Session) resolvePKI(ctx context.Context, o *observe.Cluster) (*resolvedPKI, error) {
	r := &resolvedPKI{}
	var err error
	if r.rot, err = s.rotationNow(); err != nil {
		return nil, err
	}
	if a := r.rot.decision.Resume; a != nil && a.Rotation.CA {
		if err := s.resumeCARotation(r, o); err != nil {
			return nil, err
		}
		return r, nil
	}
	existing, err := pki.Load(s.opts.StateDir)
	var nf *pki.NotFoundError
	switch {
	case err == nil:
		r.source = PKISource{Kind: PKIStateDir, From: s.opts.StateDir}
		if err := s.checkSameCA(o, existing.Certs[pki.CACertName].CertPEM); err != nil {
			return nil, stalls(ReasonStateDamaged, err)
		}
	case errors.As(err, &nf):
		var newCA *NewCAError
		existing, r.source, err = s.recoverPKI(ctx, o)
		switch {
		case errors.As(err, &newCA):
			// A plan may show what a new CA would change; Apply refuses.
			r.source, r.newCA = PKISource{Kind: PKINew}, err
		case err != nil:
			return nil, err
		default:
			r.save = true
		}
	default:
		return nil, retries(ReasonFailed, err)
	}
	req := s.req
	if d := r.rot.decision; d.Issue != nil && existing != nil {
		req.Rotate = d.Issue
	}
	if r.set, r.changes, err = pki.Ensure(existing, req, s.opts.Now()); err != nil {
		return nil, err
	}
	r.state, r.save = r.set, r.save || len(r.changes) > 0
	if err := s.issueRotation(r, existing); err != nil {
		return nil, err
	}
	return r, nil
}

// caPath is the CA certificate on every node.
var caPath, caKeyPath = pki.NodePath(pki.CACertName)

// checkSameCA refuses a state directory whose CA is not the one the nodes
// trust: applying it would break every component's TLS. accepted are the
// contents kube-ca.pem may have on a node: the CA, and while the CA is
// rotated, the other generation and both together.
func (s *Session) checkSameCA(o *observe.Cluster, accepted ...[]byte) error {
	var want []string
	for _, b := range accepted {
		want = append(want, observe.FileHash(b))
	}
	for _, a := range sortedAddrs(o) {
		n := o.Nodes[a]
		if got, ok := n.Files[caPath]; ok && !slices.Contains(want, got) {
			return fmt.Errorf("the CA in state directory %s is not the CA of node %s (%s differs): "+
				"the state directory belongs to another cluster; give the right --state-dir, "+
				"or move this one away and rigger recovers the PKI from a controlplane node", s.opts.StateDir, a, caPath)
		}
	}
	return nil
}

// recoverPKI reads the PKI from the first reachable controlplane node that
// has the CA key; without one, the cluster must have no trace on any node
// to get a new PKI (a nil set, source PKINew).
func (s *Session) recoverPKI(ctx context.Context, o *observe.Cluster) (*pki.Set, PKISource, error) {
	var tried []string
	for _, a := range caNodes(o) {
		files, err := s.nodeSSLFiles(ctx, a)
		if err == nil {
			var set *pki.Set
			if set, err = pki.FromFiles(files); err == nil {
				s.opts.Log.Warn("state directory had no certificates: recovered the PKI from a node",
					"cluster", s.c.ClusterName, "node", a, "state_dir", s.opts.StateDir)
				return set, PKISource{Kind: PKIRecovered, From: a}, nil
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
		return nil, PKISource{}, fmt.Errorf("%s, but nodes %s run this cluster: rigger will not make a new CA for an existing cluster; "+
			"restore the state directory, or bring a controlplane node with /etc/kubernetes/ssl back", msg, strings.Join(traces, ", "))
	}
	if len(unreachable) > 0 {
		return nil, PKISource{}, &NewCAError{StateDir: s.opts.StateDir, Unreachable: unreachable}
	}
	return nil, PKISource{Kind: PKINew}, nil
}

// caNodes are the reachable nodes that hold the CA's key (controlplane
// nodes), sorted: where the PKI can be read back from.
func caNodes(o *observe.Cluster) []string {
	var out []string
	for _, a := range sortedAddrs(o) {
		if n := o.Nodes[a]; n.Reachable && n.Files[caKeyPath] != "" {
			out = append(out, a)
		}
	}
	return out
}

// nodeSSLFiles reads the files of pki.NodeDir on node a, by path.
func (s *Session) nodeSSLFiles(ctx context.Context, a string) (map[string][]byte, error) {
	e, err := s.docker(ctx, a)
	if err != nil {
		return nil, err
	}
	return dockerop.ReadDir(ctx, e, a, s.c.SystemImages.Alpine, strings.TrimSuffix(pki.NodeDir, "/"))
}

func sortedAddrs(o *observe.Cluster) []string {
	out := make([]string, 0, len(o.Nodes))
	for a := range o.Nodes {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// PKI returns the cluster's certificates as they are: those of the state
// directory or, when it has none, those of a controlplane node (then saved
// to the state directory). It never makes or reissues any: a cluster that
// no node runs yet is an error that says to apply first.
func (s *Session) PKI(ctx context.Context) (*pki.Set, error) {
	set, err := pki.Load(s.opts.StateDir)
	var nf *pki.NotFoundError
	if errors.As(err, &nf) {
		set, _, err = s.recoverPKI(ctx, s.observeNodes(ctx))
		if err == nil && set == nil {
			return nil, fmt.Errorf("no certificates for cluster %s: the state directory %s has none and no node runs the cluster: run rigger apply first",
				s.c.ClusterName, s.opts.StateDir)
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

// Kubeconfig returns the admin kubeconfig: the API server of the first
// controlplane node, with the kube-admin certificate, from PKI.
func (s *Session) Kubeconfig(ctx context.Context) ([]byte, error) {
	set, err := s.PKI(ctx)
	if err != nil {
		return nil, err
	}
	return pki.AdminKubeconfig(set, s.req)
}
