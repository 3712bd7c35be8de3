package reconcile

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
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
		if st, err = s.rkeStateFromAPI(ctx, o.Kubeconfig); err != nil {
			return nil, stall.Retries(stall.Failed, err)
		}
	default:
		if st, err = s.rkeStateFromNodes(ctx); err != nil {
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
	s.opts.Log.Info("adopted RKE's PKI", "cluster", s.c.ClusterName, "source", st.Source, "state_dir", s.opts.StateDir)
	return t, nil
}

// rkeStateFromAPI reads RKE's full-cluster-state through the API server
// the kubeconfig names.
func (s *Session) rkeStateFromAPI(ctx context.Context, kubeconfig string) (*rkestate.State, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig %s: %w", kubeconfig, err)
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for kubeconfig %s: %w", kubeconfig, err)
	}
	st, err := rkestate.FromCluster(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("RKE's state through the API server of %s: %w", kubeconfig, err)
	}
	return st, nil
}

// rkeStateFromNodes reads what RKE deployed to the first reachable
// controlplane node with the CA's key: every certificate and key under
// /etc/kubernetes/ssl and encryption.yaml. The nodes do not say which
// cluster.yml RKE ran, so the state takes cluster.yml's nodes.
func (s *Session) rkeStateFromNodes(ctx context.Context) (*rkestate.State, error) {
	var tried []string
	o := s.observeNodes(ctx, true, 0)
	for _, a := range pkisource.CANodes(o) {
		files := pkisource.SSLFiles(o.Nodes[a])
		set, err := pki.FromFiles(files)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", a, err))
			continue
		}
		st := &rkestate.State{Source: "node " + a + ":" + pki.NodeDir, Certs: set.Certs,
			EncryptionConfig: files[path.Join(pki.NodeDir, rkestate.EncryptionFile)]}
		for _, n := range s.c.Nodes {
			st.Nodes = append(st.Nodes, rkestate.Node{Address: n.Address, InternalAddress: n.InternalAddress,
				HostnameOverride: n.HostnameOverride, Roles: n.Role})
		}
		return st, nil
	}
	_, caKey := pki.NodePath(pki.CACertName)
	msg := "no reachable controlplane node holds " + caKey
	if len(tried) > 0 {
		msg = "the PKI could not be read from any controlplane node (" + strings.Join(tried, "; ") + ")"
	}
	return nil, fmt.Errorf("adopt from the nodes: %s: give RKE's cluster.rkestate (--rkestate) or its kube_config_cluster.yml (--kubeconfig)", msg)
}
