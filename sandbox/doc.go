// Package sandbox makes real local nodes for rigger to manage: hosts reached
// over SSH that run a Docker engine, all on this machine, the way kind and
// RKE's old --dind mode gave them.
//
// Every node is a host of its own, made of Linux namespaces (the recipe in
// shared/ENVIRONMENT.md):
//
//   - a network namespace (rigger-sandbox-<name>-<node>) with one veth into a
//     bridge in the root namespace (rigsb<subnet>, 10.231.<subnet>.1/24) and
//     its own address 10.231.<subnet>.11, .12, …; an unreachable route for
//     10.231.0.0/16 is set before anything else, and a policy rule refuses to
//     route anything from the bridge, so no sandbox traffic leaves the machine;
//   - a persistent mount namespace and UTS namespace (bind-mounted files under
//     /run/rigger-sandbox/<name>/) in which the node's own directories under
//     /var/lib/rigger-sandbox/<name>/<node>/ are bind-mounted over /run,
//     /etc/kubernetes, /var/lib/docker, /var/lib/etcd, /var/lib/kubelet,
//     /opt/rke and the other paths a Kubernetes node owns, and its hostname
//     is <name>-<node>;
//   - OpenSSH's sshd on <address>:22, accepting the sandbox's key for root;
//   - a Docker engine on the default socket /var/run/docker.sock, with a runc
//     wrapper as default runtime that makes privileged containers work on
//     machines whose capability bounding set lacks CAP_SYS_RESOURCE.
//
// The node daemons are started by a per-sandbox init process (tini as a child
// subreaper), so that they outlive the command that made the sandbox and
// every process that ends is reaped. Everything the sandbox makes is written
// down in its state directory first, so that Down removes it all, also when
// Up was killed half-way.
//
// With Options.Images the sandbox also builds, without any registry, the
// images a cluster needs (rigger's own, etcd and the Kubernetes components
// built from the Go module proxy, a pause image) and puts them into every node's engine: a new node's engine starts from the
// engine store, the images imported once per machine (enginestore.go). Slow
// outputs are cached in RIGGER_CACHE (default /var/cache/rigger). It builds
// the default release (KubernetesVersion, with EtcdVersion) and, on request
// (Options.KubernetesVersions), the others of KubeReleases: the targets of
// minor upgrades, whose images VersionImages names (versions.go).
//
// Everything here needs root.
package sandbox
