package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
)

// PKISource says where a plan's certificates come from (pkisource.Source).
type PKISource = pkisource.Source

// PKIKind is where a plan's certificates come from.
type PKIKind = pkisource.Kind

// Where a plan's certificates come from (package pkisource).
const (
	PKIStateDir  = pkisource.StateDir
	PKIRecovered = pkisource.Recovered
	PKINew       = pkisource.New
)

// NewCAError is a cluster without certificates anywhere rigger could look
// while some of its nodes did not answer (pkisource.NewCAError).
type NewCAError = pkisource.NewCAError

// resolvePKI is the PKI of a plan (pkisource.Resolve) from the state st,
// the observed nodes o and what the command line asks (a).
func (s *Session) resolvePKI(st *state, o *observe.Cluster, a asked) (*pkisource.Resolved, error) {
	r, err := pkisource.Resolve(pkisource.Input{StateDir: s.opts.StateDir, Req: s.req, State: st.pki,
		Rotation: st.rotation, Old: st.old, New: st.new,
		AskedYML: certrotate.FromSpec(s.c.RotateCertificates), AskedCLI: a.rotate, Now: s.opts.Now()}, o)
	if err == nil && r.Source.Kind == PKIRecovered {
		s.opts.Log.Warn("state directory had no certificates: recovered the PKI from a node",
			"cluster", s.c.ClusterName, "node", r.Source.From, "state_dir", s.opts.StateDir)
	}
	return r, err
}

// PKI returns the cluster's certificates as they are: those of the state
// directory or, when it has none, those of a controlplane node. It writes
// nothing (the next apply saves recovered certificates to the state
// directory) and never makes or reissues any: a cluster that no node runs
// yet is an error that says to apply first.
func (s *Session) PKI(ctx context.Context) (*pki.Set, error) {
	set, err := pki.Load(s.opts.StateDir)
	var nf *pki.NotFoundError
	if errors.As(err, &nf) {
		set, _, err = pkisource.Recover(s.opts.StateDir, s.observeNodes(ctx, true, 0))
		if err == nil && set == nil {
			return nil, fmt.Errorf("no certificates for cluster %s: the state directory %s has none and no node runs the cluster: run rigger apply first",
				s.c.ClusterName, s.opts.StateDir)
		}
	}
	if err != nil {
		return nil, err
	}
	return set, nil
}
