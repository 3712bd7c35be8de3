package pki

import (
	"errors"
	"fmt"
	"net"
)

// APIServerPort is the API server's port, and nginx-proxy's on nodes
// without the controlplane role.
const APIServerPort = "6443"

// localAPIServer is the API server as every node's components reach it: the
// local API server on controlplane nodes, nginx-proxy on the others.
const localAPIServer = "https://127.0.0.1:" + APIServerPort

// NodeFiles is what a node gets, keyed by path on the node (NodePath,
// KubeconfigPath), as RKE lays it out:
//
//   - every node: kube-ca.pem, kube-node and kube-proxy with their keys and
//     kubeconfigs;
//   - an etcd node: its own kube-etcd-… certificate and key;
//   - a controlplane node: the whole set, the CA keys included, and the
//     kubeconfigs of kube-controller-manager and kube-scheduler. This is what
//     makes the PKI recoverable from any controlplane node (FromFiles).
//
// Kubeconfigs name https://127.0.0.1:6443 as the server and hold their
// certificates inline. A CA's file, and the kubeconfigs' CA, hold the CA
// and what Set.Trust adds to it. Every file is secret: write it 0600.
func NodeFiles(s *Set, req Request, n Node) (map[string][]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("list files of node %s: no certificates: run Ensure first", n.Name)
	}
	out := map[string][]byte{}
	ca := s.Trusted(CACertName)
	add := func(name string, withKey, kubeconfig bool) error {
		c, ok := s.Certs[name]
		if !ok {
			return fmt.Errorf("list files of node %s: no %s: run Ensure first", n.Name, name)
		}
		cp, kp := NodePath(name)
		out[cp] = s.Trusted(name)
		if withKey {
			out[kp] = c.KeyPEM
		}
		if kubeconfig {
			out[KubeconfigPath(name)] = Kubeconfig(req.ClusterName, localAPIServer, name, ca, c.CertPEM, c.KeyPEM)
		}
		return nil
	}

	if n.ControlPlane {
		for _, name := range s.Names() {
			if err := add(name, true, false); err != nil {
				return nil, err
			}
		}
		for _, name := range []string{KubeControllerCertName, KubeSchedulerCertName} {
			if err := add(name, true, true); err != nil {
				return nil, err
			}
		}
	}
	if err := add(CACertName, n.ControlPlane, false); err != nil {
		return nil, err
	}
	for _, name := range []string{KubeNodeCertName, KubeProxyCertName} {
		if err := add(name, true, true); err != nil {
			return nil, err
		}
	}
	if n.Etcd {
		if err := add(EtcdCertName(n), true, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AdminKubeconfig is the kubeconfig the cluster's operators use, as RKE
// writes kube_config_cluster.yml: the first controlplane node's API server,
// user kube-admin-<cluster>, context <cluster>. It holds the admin's key.
func AdminKubeconfig(s *Set, req Request) ([]byte, error) {
	var server string
	for _, n := range req.Nodes {
		if n.ControlPlane {
			server = "https://" + net.JoinHostPort(n.Address, APIServerPort)
			break
		}
	}
	if server == "" {
		return nil, fmt.Errorf("make admin kubeconfig: cluster %s has no controlplane node", req.ClusterName)
	}
	if s == nil {
		return nil, errors.New("make admin kubeconfig: no certificates: run Ensure first")
	}
	_, okCA := s.Certs[CACertName]
	admin, okAdmin := s.Certs[KubeAdminCertName]
	if !okCA || !okAdmin {
		return nil, fmt.Errorf("make admin kubeconfig: no %s or %s: run Ensure first", CACertName, KubeAdminCertName)
	}
	return Kubeconfig(req.ClusterName, server, "kube-admin-"+req.ClusterName, s.Trusted(CACertName), admin.CertPEM, admin.KeyPEM), nil
}
