package reconcile

import (
	"context"
	"time"

	"github.com/rigger/rigger/reconcile/rkestate"
	"github.com/rigger/rigger/reconcile/stall"
)

// AdoptOptions says where rigger adopt takes a running RKE cluster's PKI
// from; with neither set, from a controlplane node.
type AdoptOptions struct {
	// RKEState is RKE's cluster.rkestate, parsed (rkestate.Parse).
	RKEState *rkestate.State
	// Kubeconfig is a kubeconfig file with an administrator's credentials
	// (RKE's kube_config_cluster.yml): RKE's state is read from the
	// full-cluster-state Secret (or ConfigMap) of kube-system.
	Kubeconfig string
}

// Adopt takes over the PKI and the secrets encryption configuration of a
// cluster RKE runs, never making a new CA. RKE's state comes from
// cluster.rkestate, from the API server (the full-cluster-state Secret RKE
// keeps) or, without either, from the first reachable controlplane node's
// /etc/kubernetes/ssl, where RKE keeps every certificate and key but the
// admin's (rigger issues that one, signed by RKE's CA). Adopt checks that
// RKE's state is of this cluster.yml (rkestate.State.Check), takes what
// rigger needs of it (rkestate.State.Take) and writes it to the state
// directory, which must not hold another CA (rkestate.Taken.Save). The next
// plan then replaces RKE's containers with rigger's, keeping every
// certificate RKE made that serves. It changes nothing on the nodes.
func (s *Session) Adopt(ctx context.Context, o AdoptOptions) (*rkestate.Taken, error) {
	st := o.RKEState
	var err error
	switch {
	case st != nil:
	case o.Kubeconfig != "":
		if st, err = rkestate.FromKubeconfig(ctx, o.Kubeconfig); err != nil {
			return nil, stall.Retries(stall.Failed, err)
		}
	default:
		if st, err = rkestate.FromNodes(s.observeNodes(ctx, true, 0), s.c); err != nil {
			return nil, stall.Retries(stall.Failed, err)
		}
	}
	if err := st.Check(s.c); err != nil {
		return nil, stall.Stalls(stall.InvalidSpec, err)
	}
	t, err := st.Take(s.req, time.Now())
	if err != nil {
		return nil, stall.Stalls(stall.StateDamaged, err)
	}
	if err := t.Save(s.opts.StateDir); err != nil {
		return nil, stall.Stalls(stall.StateDamaged, err)
	}
	t.ToAdd = st.ToAdd(s.c)
	s.opts.Log.Info("adopted RKE's PKI", "cluster", s.c.ClusterName, "source", st.Source, "state_dir", s.opts.StateDir)
	return t, nil
}
