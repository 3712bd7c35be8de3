package rkestate

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/spec"
)

// FromNodes is what RKE deployed to the first reachable controlplane node
// of o with the CA's key, read from its files' contents: every certificate
// and key under /etc/kubernetes/ssl and encryption.yaml; and its nodes as
// far as the nodes tell (NodesFromContainers).
func FromNodes(o *observe.Cluster, c *spec.Cluster) (*State, error) {
	var tried []string
	for _, a := range pkisource.CANodes(o) {
		files := pkisource.SSLFiles(o.Nodes[a])
		set, err := pki.FromFiles(files)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", a, err))
			continue
		}
		return &State{Source: "node " + a + ":" + pki.NodeDir + " and the nodes' containers", Certs: set.Certs,
			EncryptionConfig: files[path.Join(pki.NodeDir, EncryptionFile)], Nodes: NodesFromContainers(o, c)}, nil
	}
	_, caKey := pki.NodePath(pki.CACertName)
	msg := "no reachable controlplane node holds " + caKey
	if len(tried) > 0 {
		msg = "the PKI could not be read from any controlplane node (" + strings.Join(tried, "; ") + ")"
	}
	return nil, fmt.Errorf("adopt from the nodes: %s: give RKE's cluster.rkestate (--rkestate) or its kube_config_cluster.yml (--kubeconfig)", msg)
}

// NodesFromContainers are the nodes of c as RKE's containers on them say
// RKE deployed them, for a state read from the nodes: the nodes do not say
// which cluster.yml RKE ran, but a reachable node's containers say that it
// is an etcd node (an etcd container) or a controlplane node
// (kube-apiserver), so that Check finds a cluster.yml that takes either
// role from a node, which the next apply would carry out. A role the
// containers lack is none of Check's business: RKE may have failed before
// deploying it, and the next apply deploys it. The worker role (every RKE
// node runs a kubelet), the names and the addresses are taken from c. A
// reachable node without any of the containers is not one RKE provisioned
// (ToAdd); an unreachable one is taken as c says.
func NodesFromContainers(o *observe.Cluster, c *spec.Cluster) []Node {
	var out []Node
	for _, n := range c.Nodes {
		node := Node{Address: n.Address, InternalAddress: n.InternalAddress, HostnameOverride: n.HostnameOverride, Roles: n.Role}
		if on := o.Nodes[n.Address]; on != nil && on.Reachable {
			if len(on.Containers) == 0 {
				continue
			}
			node.Roles = slices.Clone(n.Role)
			for role, name := range map[string]string{spec.RoleEtcd: "etcd", spec.RoleControlPlane: "kube-apiserver"} {
				if _, ok := on.Containers[name]; ok && !slices.Contains(node.Roles, role) {
					node.Roles = append(node.Roles, role)
				}
			}
		}
		out = append(out, node)
	}
	return out
}
