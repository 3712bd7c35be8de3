// Package reconcile makes a cluster converge to its cluster.yml. It holds
// the Session and its wiring only: what reads and writes the nodes, the
// state directory and the API server, around one decision made elsewhere.
// One plan is made in three steps, each in one place:
//
//	               state directory          nodes, etcd, API server
//	                     │                            │
//	1. observe   loadState (state.go:     observe, observeWithPKI
//	             decide.LoadState)        (planning.go, observation.go): the
//	                     │                nodes without credentials (package
//	                     │                observe, through package reach),
//	                     │                the PKI resolved from both
//	                     │                (decide.Credentials), then with it
//	                     │                etcd's members, the Nodes and the
//	                     │                add-ons' server-side dry run
//	                     ▼                            ▼
//	2. decide    decide.Compute: one pure function of cluster.yml, the
//	             state's records, the observation, what the command line
//	             asked and the time. The stage of each staged operation
//	             (package staged), the files and restarts it needs, the
//	             steps (plan.Compute), the budgets of the rolling phases,
//	             the removal guard and the Kubernetes Nodes' changes: a
//	             decide.Planned value, never changed after. rigger plan
//	             shows all of it; the scenario table and the simulated-node
//	             benchmarks call the same function.
//	                     │
//	3. execute   applyOnce (apply.go): the plan's phases, in order: refuse
//	             a blocked plan, take the cluster's Lease, write the state
//	             directory first (the PKI, each staged operation's Before),
//	             execute.Run with the Kubernetes side (kubenode.Side) and a
//	             snapshot (before an upgrade or etcd changes) injected as
//	             funcs, the Nodes, the removed nodes forgotten, and each
//	             staged operation's stage ended (the After its Before gave),
//	             which records the next one.
//
// Session.Apply is the one loop: when a stage a plan carried out is done
// and another follows (staged.Operation.Next), it observes, decides and
// executes again, each plan shown to ApplyOptions.Pass, for rigger apply and
// serve alike. No plan is made, patched or re-read anywhere else during an
// apply.
//
// One part of an apply stays level-triggered, and it is the only one: once
// the steps ran, kubenode.Side.Reconcile reads the Nodes again and brings
// each machine's own Node in line with cluster.yml (waits for it to be
// Ready, sets its labels and taints, lifts rigger's own cordon), because
// the apply itself registers, restarts and cordons those Nodes after the
// plan observed them. What it does there is a function of cluster.yml
// alone (kubenode.Wanted), which the plan shows as its NodeChanges; the
// one destructive change, deleting stale Nodes, is decided by the plan and
// carried out only for the Nodes it names (and only while they are stale
// still).
//
// Status is what a plan saw (decide.Planned.Status); rigger doctor reads
// through the same observation (Session.Doctor, package doctor); etcd
// snapshots, their schedule, restores and the restore request are
// functions of package etcdsnap over the value Session.Etcd gives. Errors
// carry a Reason and whether they stall (package stall): the gitops loop
// retries the others.
package reconcile
