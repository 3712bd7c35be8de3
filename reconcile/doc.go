// Package reconcile makes a cluster converge to its cluster.yml. It holds
// the Session and its wiring only; the work is done by the packages below
// it. One plan is made in three steps, each in one place:
//
//	               state directory          nodes, etcd, API server
//	                     │                            │
//	1. observe   loadState (state.go)   observe (planning.go, observation.go):
//	                     │                the nodes without credentials
//	                     │                (package observe, through package
//	                     │                reach), the PKI resolved from both
//	                     │                (pkisource.Resolve), then with it
//	                     │                etcd's members and the Nodes
//	                     │                (observe.EtcdMembers, observe.Nodes)
//	                     ▼                            ▼
//	2. plan      compute (planning.go): pure. The stage of each staged
//	             operation from its record (certrotate.Plan through
//	             pkisource, secretsenc.Decide), the files and restarts
//	             it needs (desired.Node.Reload), the steps (plan.Compute),
//	             the Kubernetes side (kubenode.Changes); then the add-ons'
//	             server-side dry run. A Planned value, never changed after.
//	                     │
//	3. execute   applyOnce (apply.go): under the cluster's Lock and Lease,
//	             the state directory written first (PKI, rotation record,
//	             key), execute.Run with the Kubernetes side (kubenode.Side)
//	             and a snapshot (before an upgrade or etcd changes) injected as funcs, then
//	             the end of the plan's stage (certrotate.Plan.Finish,
//	             secretsenc.Plan.EndStage), which records the next one.
//
// Session.Apply is the one loop: when the stage a plan carried out is done
// and another follows (Planned.Next), it observes, plans and executes again,
// each plan shown to ApplyOptions.Pass, for rigger apply and serve alike.
// No plan is made, patched or re-read anywhere else during an apply.
//
// Status (package report) is what a plan saw; etcd snapshots, their
// schedule, restores and the restore request are functions of package
// etcdsnap over the value Session.Etcd gives. Errors that status reports
// carry a Reason and whether they stall (package stall, Classify): the
// gitops loop retries the others.
package reconcile
