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
//  1. PhaseFiles: each node's files written (certificates, kubeconfigs,
//     configuration), one step a node, before any container that reads
//     them changes.
//  2. PhaseEtcd: the etcd container of each node, nodes in cluster.yml
//     order, with the membership changes (learners added, promoted,
//     members removed) in a safe order.
//  3. PhaseAPIServer, in a Kubernetes minor upgrade only (Plan.Upgrade):
//     kube-apiserver, node by node, before any other component.
//  4. PhaseControlPlane: kube-apiserver (but in an upgrade),
//     kube-controller-manager and kube-scheduler, node by node in
//     cluster.yml order.
//  5. PhaseWorker: nginx-proxy, kubelet and kube-proxy, node by node in
//     cluster.yml order (and any other rigger container of the cluster that
//     rigger no longer runs, by name, after them).
//  6. PhaseRemovedNodes: the containers of nodes gone from cluster.yml,
//     nodes sorted by address.
//
// Within a node and phase, containers come in start order (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, nginx-proxy,
// kubelet, kube-proxy). A container that should no longer run on a node
// still in cluster.yml is removed in its component's phase. The same inputs
// always give the same plan.
//
// # Kubernetes upgrades
//
// A step that moves a Kubernetes component to a newer minor version (the
// images' tags say the versions) makes the plan an upgrade (Plan.Upgrade):
// the API servers' steps move to PhaseAPIServer, the nodes whose kubelet
// moves are drained first (Upgrade.Drain), and while a controlplane node
// does not answer the kubelets and kube-proxies that would move wait
// (Upgrade.Held): a kubelet must never be newer than an API server. The
// executor takes a snapshot before an upgrade's first step.
//
// # Restarts a staged operation asks for
//
// A container restarts when it reads a file that changed on its node, and
// when it reads one its node's desired.Node.Reload names: the stage of a
// staged operation that its caller decided (a certificate rotation, a stage
// of the secrets encryption key's rotation) asks every reader of those
// files to read them again, also where an apply that stopped wrote them
// already. The reason is the one Reload gives.
//
// # Budgets and guards
//
// Unavailability resolves upgrade_strategy's budgets for the executor's
// batches, and CheckRemovals refuses a plan that removes more nodes than
// rigger.max_removed_nodes allows; CheckDowngrade, CheckSkippedMinor,
// CheckSkew, CheckEtcdUpgrade, CheckStoredAPIs and CheckDocker refuse what
// Kubernetes' version skew policy and API removals, etcd's upgrade rules
// and RKE's Docker table forbid.
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
