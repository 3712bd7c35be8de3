// Package kubenode keeps the Kubernetes side of the nodes in line with
// cluster.yml: the labels and taints rigger manages, cordon and drain
// around a node's changes, the wait for a new kubelet's Node to be Ready,
// the removal of a removed machine's Node, the Nodes nobody owns any more
// (rigger.stale_nodes), the kubelets' authorization, and a copy of the
// cluster's state in a Secret.
//
// Which Node belongs to which machine is observed (observe.Link), and what
// the plan makes of it (a kubelet restarted for a missing Node, NotReady
// nodes first) is decided by plan.Compute; the pure parts here (Diff,
// Changes) are table-tested, the rest talks to the API server through a
// kubernetes.Interface, retrying what passes on its own (Retriable).
package kubenode
