// Package observe reads the live state of a cluster's nodes through a
// transport: whether each node answers (and why not), its Docker engine, the
// containers rigger manages there and the hashes of its files. The
// observed value (Cluster) also holds the etcd membership and the Nodes the
// API server lists, linked to the machines of cluster.yml (Link), which the
// reconcile session reads with the cluster's certificates. It changes
// nothing.
package observe

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/storedapi"
)

// Cluster is what was seen of a cluster at one time: its nodes, the
// membership of its etcd and the Nodes its API server lists. It is filled
// once per reconcile and not changed afterwards.
type Cluster struct {
	// At is when the observation started.
	At time.Time
	// Nodes by address: every node asked about, reachable or not.
	Nodes map[string]*Node
	// Etcd is the etcd cluster's membership as a member listed it, nil
	// when none answered (a new cluster, or every member down) or rigger
	// runs no etcd (external_urls). Reading it takes the cluster's
	// certificates: the reconcile layer fills it, with EtcdErr saying why
	// it is nil when a member should have answered.
	Etcd    *Etcd `json:"etcd,omitempty"`
	EtcdErr error `json:"-"`
	// Kubernetes is what the API server says of the Nodes; nil when it
	// was not asked (no certificates yet).
	Kubernetes *Kubernetes `json:"kubernetes,omitempty"`
	// StoredAPIs is what etcd stores at API versions that the Kubernetes
	// upgrade cluster.yml asks for takes away; nil when cluster.yml asks
	// for none (or rigger runs no etcd). The reconcile layer reads it
	// with the cluster's certificates; StoredAPIsErr says why etcd could
	// not be read, with StoredAPIs naming the upgrade.
	StoredAPIs    *storedapi.Found `json:"stored_apis,omitempty"`
	StoredAPIsErr error            `json:"-"`
}

// Etcd is the membership of the etcd cluster.
type Etcd struct {
	Members []etcdmember.Member `json:"members"`
}

// Kubernetes is the Nodes the API server lists and which machine of
// cluster.yml owns which (Link).
type Kubernetes struct {
	Nodes []corev1.Node `json:"-"`
	Link  *Linkage      `json:"-"`
	// Err says why the Nodes could not be listed (then Nodes and Link are
	// empty): no controlplane node reachable, the API server down.
	Err error `json:"-"`
	// StalePods are, by Node name, the network plugin's pods made for an
	// earlier Node of that name (kubenode.StalePluginPods), as
	// "namespace/name". Best effort: nil when they could not be listed.
	StalePods map[string][]string `json:"-"`
	// StrandedPods are, by Node name, the pods of a recent Node whose
	// address is outside its pod subnets (kubenode.StrandedPods), as
	// "namespace/name (address)". Best effort, as StalePods.
	StrandedPods map[string][]string `json:"-"`
	// Self is rigger's own pod when rigger runs in the cluster it
	// observes (rigger serve deployed into the cluster it reconciles),
	// nil otherwise or when it could not be looked up (SelfErr).
	Self    *Self `json:"-"`
	SelfErr error `json:"-"`
}

// PodRef names the pod rigger runs as and the UID it was made with (the
// downward API's metadata.namespace, metadata.name and metadata.uid): a
// pod of that name in another cluster is not rigger's.
type PodRef struct{ Namespace, Name, UID string }

// String is "namespace/name".
func (r PodRef) String() string { return r.Namespace + "/" + r.Name }

// Self is where rigger's own pod runs in the cluster it reconciles.
type Self struct {
	// Pod is "namespace/name".
	Pod string
	// Node is the Node the pod runs on, and Address the machine of
	// cluster.yml that owns it; for a Node no machine of cluster.yml owns
	// (its node is being removed), the value of its address label
	// (desired.NodeAddressLabelValue); "" when it has none.
	Node, Address string
	// Controller is the UID of the pod's controller (its ReplicaSet): the
	// other pods it controls are rigger's other replicas. "": none.
	Controller string
}

// Node is one node as observed.
type Node struct {
	Address string
	// Reachable says whether the node's Docker engine answered.
	Reachable bool
	// Err says why it did not (a typed transport error), nil when reachable.
	Err error `json:"-"`
	// Error is Err's text, for status and JSON output.
	Error string `json:"error,omitempty"`
	// DockerVersion and DockerAPIVersion are the engine's.
	DockerVersion    string `json:"docker_version,omitempty"`
	DockerAPIVersion string `json:"docker_api_version,omitempty"`
	// Containers are the containers of this cluster on the node, by
	// container name: those with the label io.rigger.cluster=<cluster
	// name>, and RKE's (IsRKEContainer, without rigger's labels, RKE set),
	// which rigger adopt's takeover replaces.
	Containers map[string]Container `json:"containers,omitempty"`
	// FilesRead says whether Files were read: false when the helper image
	// is not on the node yet, and the plan must then write every file.
	FilesRead bool `json:"files_read,omitempty"`
	// Files are the hashes (FileHash) of the files under the directory
	// rigger manages (/etc/kubernetes), by path on the node.
	Files map[string]string `json:"files,omitempty"`
	// Contents are the files themselves, by path, when they were kept
	// (Request.KeepFiles). They hold private keys: never in JSON.
	Contents map[string][]byte `json:"-"`
	// CertExpiry is when each certificate among Files expires, by path.
	CertExpiry map[string]time.Time `json:"cert_expiry,omitempty"`
}

// Container is a rigger-managed container, or RKE's, as observed.
type Container struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Image string `json:"image"`
	// State is Docker's: created, running, restarting, exited, dead, …
	State string `json:"state"`
	// Health is the health check's status, or "" when there is none.
	Health string `json:"health,omitempty"`
	// ExitCode is the last exit code of a container that is not running
	// (restarting, exited), as the engine's list shows it; nil for a
	// running one, or when the list does not show it.
	ExitCode *int `json:"exit_code,omitempty"`
	// RestartCount is how many times Docker restarted the container
	// since it was last started through the API; read (by an inspection)
	// only for a container that is restarting or StartedSince, 0
	// otherwise.
	RestartCount int `json:"restart_count,omitempty"`
	// StartedSince is set for a running container that started after the
	// last apply ended (Request.SinceApply): not by rigger, but by
	// Docker's restart policy (RestartCount says how often), a restart of
	// the engine or the machine, or by hand.
	StartedSince bool `json:"started_since_last_apply,omitempty"`
	// Component, SpecHash and Spec are read from the labels rigger set when
	// it created the container (io.rigger.component, io.rigger.spec-hash,
	// io.rigger.spec).
	Component string `json:"component,omitempty"`
	SpecHash  string `json:"spec_hash,omitempty"`
	// Spec is the canonical JSON of the hashed fields of the container's
	// desired spec when it was created, so that a plan can say what changed.
	Spec string `json:"spec,omitempty"`
	// RKE is set for a container RKE made (no rigger labels, one of RKE's
	// names): it has no spec hash, and rigger replaces it with its own.
	RKE bool `json:"rke,omitempty"`
}
