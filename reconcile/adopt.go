package reconcile

import (
	"context"
	"errors"

	"github.com/rigger/rigger/reconcile/rkestate"
)

// AdoptOptions says where rigger adopt takes a running RKE cluster's PKI
// from.
type AdoptOptions struct {
	// RKEState is RKE's cluster.rkestate, parsed (rkestate.Parse); nil
	// recovers it from the nodes instead.
	RKEState *rkestate.State
}

// Adopt takes over the PKI and the secrets encryption configuration of a
// cluster RKE runs, never making a new CA: it checks that RKE's state is of
// this cluster.yml (rkestate.State.Check), takes what rigger needs of it
// (rkestate.State.Take) and writes it to the state directory, which must
// not hold another CA (rkestate.Taken.Save). The next plan then replaces
// RKE's containers with rigger's, keeping every certificate RKE made that
// serves. It changes nothing on the nodes.
func (s *Session) Adopt(ctx context.Context, o AdoptOptions) (*rkestate.Taken, error) {
	st := o.RKEState
	if st == nil {
		return nil, errors.New("adopt: recovering RKE's state from the nodes is not done yet: give --rkestate")
	}
	if err := st.Check(s.c); err != nil {
		return nil, stalls(ReasonInvalidSpec, err)
	}
	t, err := st.Take(s.req)
	if err != nil {
		return nil, stalls(ReasonStateDamaged, err)
	}
	if err := t.Save(s.opts.StateDir); err != nil {
		return nil, stalls(ReasonStateDamaged, err)
	}
	s.opts.Log.Info("adopted RKE's PKI", "cluster", s.c.ClusterName, "source", st.Source, "state_dir", s.opts.StateDir)
	return t, nil
}
