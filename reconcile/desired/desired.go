package desired

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// Names of the component containers, fixed as in RKE: the planner finds a
// node's containers by these names.
const (
	Etcd                  = "etcd"
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	NginxProxy            = "nginx-proxy"
	Kubelet               = "kubelet"
	KubeProxy             = "kube-proxy"
	// ServiceSidekick holds rke-tools' /opt/rke-tools for the kubelet when
	// it runs cri-dockerd (enable_cri_dockerd).
	ServiceSidekick = "service-sidekick"
)

// Labels rigger puts on every container it creates.
const (
	// LabelCluster is the cluster_name of the cluster the container belongs to.
	LabelCluster = "io.rigger.cluster"
	// LabelComponent is the container's component name (Etcd, Kubelet, …).
	LabelComponent = "io.rigger.component"
	// LabelSpecHash is Container.Hash of the spec the container was created from.
	LabelSpecHash = "io.rigger.spec-hash"
	// LabelSpec is Container.SpecJSON: what the hash was computed from.
	LabelSpec = "io.rigger.spec"
)

// NodeAddressLabel is the label every kubelet puts on its Node: the
// node's address in cluster.yml (NodeAddressLabelValue). rigger finds a
// machine's Node by it, never by name.
const NodeAddressLabel = "rigger.io/node-address"

// NodeAddressLabelValue is an address as a label value: an IPv6 address's
// colons, which label values cannot hold, become underscores.
func NodeAddressLabelValue(address string) string {
	return strings.ReplaceAll(address, ":", "_")
}

// Container settings shared by every component, as RKE sets them.
const (
	// NetworkModeHost: every component uses the node's network.
	NetworkModeHost = "host"
	// PidModeHost: the kubelet and kube-proxy see the node's processes.
	PidModeHost = "host"
	// RestartAlways: Docker restarts a component that exits, etcd included.
	RestartAlways = "always"
	// RestartNo: a container that runs once (ServiceSidekick).
	RestartNo = "no"
)

// Cluster is the desired state of a whole cluster.
type Cluster struct {
	// Name is the cluster_name.
	Name string `json:"name"`
	// PrefixPath is prefix_path: where RKE's node directories are.
	PrefixPath string `json:"prefix_path,omitempty"`
	// Nodes in cluster.yml order.
	Nodes []Node `json:"nodes"`
}

// Node is what should run on one node.
type Node struct {
	// Address is the node's address in cluster.yml, its identity.
	Address string `json:"address"`
	// InternalAddress is where the node's components listen and talk to
	// each other (internal_address, or address).
	InternalAddress string `json:"internal_address"`
	// Hostname is the node's name in Kubernetes (hostname_override).
	Hostname string `json:"hostname"`
	// Roles of the node, in the order etcd, controlplane, worker.
	Roles []string `json:"roles"`
	// Containers in start order: etcd, the control plane, nginx-proxy, then
	// kubelet and kube-proxy.
	Containers []Container `json:"containers"`
	// Files are the files the node's containers read (certificates,
	// kubeconfigs, configs), by path on the node. Build leaves them empty:
	// the certificates come from reconcile/pki, which the caller adds. They
	// hold keys, so they never go into JSON.
	Files map[string][]byte `json:"-"`
	// Reload are paths of Files every container that reads one must read
	// again, with why: certificates reissued on request (a rotation under
	// way), the API servers' encryption configuration of a stage of an
	// operation on the key. Those containers restart, also when the node
	// has the file already (an apply that stopped after writing it), so
	// that they run with it.
	Reload map[string]string `json:"-"`
}

// Container is the desired spec of one component container.
type Container struct {
	// Name of the container on the node (Etcd, Kubelet, …).
	Name string `json:"name"`
	// Image reference, as in system_images or services.*.image.
	Image string `json:"image"`
	// Entrypoint of the container: the component's binary, or empty for
	// the image's own (nginx-proxy).
	Entrypoint []string `json:"entrypoint,omitempty"`
	// Args after the entrypoint: `--flag=value`, sorted by flag name.
	Args []string `json:"args,omitempty"`
	// Env is `NAME=value`, rigger's own first, then extra_env.
	Env []string `json:"env,omitempty"`
	// Binds are Docker bind mounts `host:container[:options]`, with
	// prefix_path applied to the host side where RKE applies it.
	Binds []string `json:"binds,omitempty"`
	// NetworkMode is the Docker network mode (always NetworkModeHost).
	NetworkMode string `json:"network_mode"`
	// PidMode is the Docker PID mode: PidModeHost or empty.
	PidMode string `json:"pid_mode,omitempty"`
	// User the container runs as, `uid:gid`, or empty for the image's.
	User string `json:"user,omitempty"`
	// Privileged containers (the kubelet and kube-proxy, as RKE).
	Privileged bool `json:"privileged,omitempty"`
	// RestartPolicy is the Docker restart policy (always RestartAlways).
	RestartPolicy string `json:"restart_policy"`
	// VolumesFrom are containers whose volumes this one mounts (the
	// kubelet: ServiceSidekick's /opt/rke-tools).
	VolumesFrom []string `json:"volumes_from,omitempty"`
	// RunOnce containers run to completion: exited is their desired state,
	// not a reason to start them again.
	RunOnce bool `json:"run_once,omitempty"`
	// Binary, when set, is the ID of the rigger binary (nodebin.Binary.ID)
	// that is copied into the container at BinaryPath before it starts: the
	// container runs rigger in an image the node already has.
	Binary string `json:"binary,omitempty"`
	// Confined containers run without any capability and cannot gain one
	// (Docker's --cap-drop ALL --security-opt no-new-privileges): those
	// that need none, as rigger's own on the nodes.
	Confined bool `json:"confined,omitempty"`
	// Labels are LabelCluster, LabelComponent, LabelSpecHash and LabelSpec.
	Labels map[string]string `json:"labels"`
	// BootstrapArgs are appended to Args only when the container is created
	// to bootstrap or join etcd (--initial-cluster and friends). etcd reads
	// them only on its first start, so they are not part of Hash: a change
	// of membership does not replace a healthy member.
	BootstrapArgs []string `json:"bootstrap_args,omitempty"`
}

// Node returns the node with the given address.
func (c *Cluster) Node(address string) (*Node, bool) {
	for i := range c.Nodes {
		if c.Nodes[i].Address == address {
			return &c.Nodes[i], true
		}
	}
	return nil, false
}

// Container returns the node's container with the given name.
func (n *Node) Container(name string) (*Container, bool) {
	for i := range n.Containers {
		if n.Containers[i].Name == name {
			return &n.Containers[i], true
		}
	}
	return nil, false
}

// HasRole reports whether the node has the role (spec.RoleEtcd, …).
func (n *Node) HasRole(role string) bool {
	for _, r := range n.Roles {
		if r == role {
			return true
		}
	}
	return false
}

// Build returns the containers that should run on each node of c, which
// must be defaulted and valid (as spec.Load returns it). It fails only on
// a cluster whose component flags RKE's metadata does not have, which
// validation refuses.
func Build(c *spec.Cluster) (*Cluster, error) {
	r, err := runRelease(c)
	if err != nil {
		return nil, fmt.Errorf("build desired containers: %w", err)
	}
	b := newBuilder(c, r)
	out := &Cluster{Name: c.ClusterName, PrefixPath: c.PrefixPath, Nodes: make([]Node, 0, len(c.Nodes))}
	for i := range b.hosts {
		out.Nodes = append(out.Nodes, b.node(&b.hosts[i]))
	}
	return out, nil
}

// release is the Kubernetes release the cluster's components run, as RKE
// finds it to pick their default flags: the series of the kubernetes
// image's tag wins over kubernetes_version (rkemeta.ServiceOptionsFor). So
// a cluster.yml with kubernetes_version v1.31.5-rancher1-1 and an image
// tagged v1.32.3-rancher1 runs 1.32's flags, and the sandbox's
// rigger-sandbox/hyperkube:v1.32.13 runs 1.32's. Past RKE's table (1.33
// and later) the options are rigger's (riggermeta.ServiceOptionsFor).
type release struct {
	// series is where the options were found: v1.31, or a whole version.
	series string
	// minor is the 1.x minor version of series.
	minor int
	// opts are RKE's default flags of each component for the release.
	opts rkemeta.Options
}

// runRelease returns the release c's components run.
func runRelease(c *spec.Cluster) (release, error) {
	opts, series, err := riggermeta.ServiceOptionsFor(c.KubernetesVersion, c.SystemImages.Kubernetes)
	if err != nil {
		return release{}, fmt.Errorf("kubernetes_version %s, image %s: %w", c.KubernetesVersion, c.SystemImages.Kubernetes, err)
	}
	major, minor, ok := seriesNumbers(series)
	if !ok || major != 1 || minor < rkemeta.MinMinor {
		return release{}, fmt.Errorf("kubernetes_version %s, image %s: rigger knows the component flags of Kubernetes v1.%d and later; upgrade with RKE first", c.KubernetesVersion, c.SystemImages.Kubernetes, rkemeta.MinMinor)
	}
	return release{series: series, minor: minor, opts: opts}, nil
}

// pastRKE reports whether the release is one of rigger's own, after RKE's
// table ends: its components run from images laid out otherwise than RKE's
// hyperkube, and flags RKE passes may be gone.
func (r release) pastRKE() bool { return r.minor >= riggermeta.FirstMinor }

// seriesNumbers reads v1.31 (or v1.31.5-rancher1-1) as 1 and 31.
func seriesNumbers(series string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(rkemeta.Series(series), "v"), ".", 2)
	if len(parts) != 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}
