package reconcile

import (
	"context"
	"errors"
	"fmt"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
)

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
