package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// apiServerLocal is the API server as seen from a controlplane node.
const apiServerLocal = "127.0.0.1:" + pki.APIServerPort

// KubeClient returns a client-go client of the cluster's API server as the
// admin (kube-admin), connected through the transport to the loopback of
// a reachable controlplane node: the API server need not be reachable from
// where rigger runs. The first reachable controlplane node of o in
// cluster.yml order serves, the others when its connection fails.
func (s *Session) KubeClient(set *pki.Set, o *observe.Cluster) (*kubernetes.Clientset, error) {
	var cps []string
	for _, n := range s.c.Nodes {
		if slices.Contains(n.Role, spec.RoleControlPlane) {
			if on := o.Nodes[n.Address]; on != nil && on.Reachable {
				cps = append(cps, n.Address)
			}
		}
	}
	if len(cps) == 0 {
		return nil, errors.New("connect to the API server: no controlplane node is reachable")
	}
	ca, admin := set.Certs[pki.CACertName], set.Certs[pki.KubeAdminCertName]
	cfg := &rest.Config{
		// The name the API server's certificate holds for its loopback.
		Host: "https://" + apiServerLocal,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: ca.CertPEM, CertData: admin.CertPEM, KeyData: admin.KeyPEM,
		},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var errs []error
			for _, node := range cps {
				conn, err := s.tr.Dial(ctx, node, network, apiServerLocal)
				if err == nil {
					return conn, nil
				}
				errs = append(errs, err)
			}
			return nil, errors.Join(errs...)
		},
		UserAgent: "rigger",
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the API server: %w", err)
	}
	return cs, nil
}
