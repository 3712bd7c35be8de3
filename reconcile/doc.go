// Package reconcile makes a cluster converge to its cluster.yml. It holds
// the Session and its wiring only; the work is done by the packages below
// it, in three steps that are three values:
//
//  1. Observe (Session.Plan, observe.go): the nodes through the transport
//     (package observe), the cluster's certificates (the state directory's,
//     or recovered from a node: pki.go), the etcd membership and the Nodes
//     the API server lists, once, into one observe.Cluster.
//  2. Plan: plan.Compute(desired, observed), a pure function, gives a
//     plan.Plan; the Planned value carries it with what it was computed
//     from and is not changed afterwards.
//  3. Execute (Session.Apply, apply.go): execute.Run carries the plan out
//     under the cluster's Lock, with the Kubernetes side of the nodes
//     (package kubenode, kubeside.go) and a snapshot before etcd changes
//     (package etcdsnap) injected as funcs.
//
// Etcd snapshots, their schedule, restores and the restore request are
// functions of package etcdsnap over the value Session.Etcd gives.
//
// Errors that status reports carry a Reason and whether they stall
// (Error, Classify): the gitops loop retries the others.
package reconcile
