// Package plan computes what must change on a cluster's nodes so that they
// run what cluster.yml describes: the diff between the desired containers
// and files (package desired) and what was observed (package observe).
//
// Compute is a pure function: it takes no context, does no I/O and returns a
// value. Every decision the executor carries out is in it: the steps, in
// order; the kubelets restarted because their Kubernetes Node is missing;
// the nodes that go first because their Node is not Ready (Plan.First);
// whether etcd starts as a new cluster (Plan.NewEtcd); the etcd membership
// changes. The executor runs the plan's Steps in the order given; dry-run
// prints the plan with Render. Every step names the node, the component, an
// Action and a Reason meant for people; Before and After point at the
// observed and desired containers the step was computed from.
//
// # Order
//
// Steps come in phases, and Step.Phase says which:
//
//  1. PhaseEtcd: the etcd container of each node, nodes in cluster.yml order.
//  2. PhaseControlPlane: kube-apiserver, kube-controller-manager and
//     kube-scheduler, node by node in cluster.yml order.
//  3. PhaseWorker: nginx-proxy, kubelet and kube-proxy, node by node in
//     cluster.yml order (and any other rigger container of the cluster that
//     rigger no longer runs, by name, after them).
//  4. PhaseRemovedNodes: the containers of nodes gone from cluster.yml,
//     nodes sorted by address.
//
// Within a node and phase, containers come in start order (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, nginx-proxy,
// kubelet, kube-proxy). A container that should no longer run on a node
// still in cluster.yml is removed in its component's phase. The same inputs
// always give the same plan.
//
// # Unreachable nodes
//
// Unreachable is not removed. A node of cluster.yml that did not answer gets
// no steps and is listed in Plan.Unreachable; a node gone from cluster.yml
// that did not answer is listed there too (with Removed set) and nothing is
// planned for it: it is reported, not blocking.
//
// # Secrets
//
// Reasons are shown to people and written to logs and status, so they never
// contain the value of an environment variable (or of a flag) whose name
// holds a secret word (spec.SecretName: key, secret, token, passw,
// credential, docker_config): such entries read `NAME=(redacted)`; nor the credentials of a
// URL in any value (spec.RedactURLs): `http://user:(redacted)@proxy`. The
// JSON encoding of a step carries only a summary of Before and After (ID,
// image, state, spec hash), never their env or spec.
package plan
