package rkestate

import (
	"fmt"
	"path"
	"strings"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/spec"
)

// FromNodes is what RKE deployed to the first reachable controlplane node
// of o with the CA's key, read from its files' contents: every certificate
// and key under /etc/kubernetes/ssl and encryption.yaml. The nodes do not
// say which cluster.yml RKE ran, so the state takes c's nodes.
func FromNodes(o *observe.Cluster, c *spec.Cluster) (*State, error) {
	var tried []string
	for _, a := range pkisource.CANodes(o) {
		files := pkisource.SSLFiles(o.Nodes[a])
		set, err := pki.FromFiles(files)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", a, err))
			continue
		}
		st := &State{Source: "node " + a + ":" + pki.NodeDir, Certs: set.Certs,
			EncryptionConfig: files[path.Join(pki.NodeDir, EncryptionFile)]}
		for _, n := range c.Nodes {
			st.Nodes = append(st.Nodes, Node{Address: n.Address, InternalAddress: n.InternalAddress,
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
