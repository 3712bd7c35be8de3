package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/rigger/rigger/internal/atomicfile"
)

// Options say what sandbox Up makes.
type Options struct {
	// Name names the sandbox: its directories, namespaces and hostnames.
	// Default "rigger".
	Name string
	// Nodes is how many nodes: node1 … nodeN. Default 3.
	Nodes int
	// Subnet is the third octet of the nodes' subnet 10.231.<Subnet>.0/24:
	// 0 gives nodes 10.231.0.11, .12, .13. Two sandboxes need distinct
	// subnets; sandboxtest documents which test package uses which.
	Subnet int
	// Images builds (cached) and loads the cluster images into every node.
	Images bool
	// ContainerdImages also imports the add-ons' pod images into every
	// node's containerd (the pause image is always there), for a kubelet
	// that runs pods with containerd (enable_cri_dockerd: false). The
	// example cluster runs them through cri-dockerd with the engine's
	// images, and the import takes half a minute on two cores.
	ContainerdImages bool
	// KubernetesVersions are Kubernetes versions (of KubeReleases) whose
	// hyperkube and etcd images are built (cached) and loaded besides the
	// default release's, e.g. the targets of an upgrade test. Their images
	// serve no key of Sandbox.SystemImages: VersionImages names them.
	KubernetesVersions []string
	// RKE also builds and loads the stand-ins for the images RKE v1.8.14's
	// own `rke up` runs (RKESystemImages): rke-tools', and hyperkube with
	// kubectl (Kubectl) for RKE's add-on Jobs.
	RKE bool
	// Kubectl is the kubectl binary of the default release, for RKE.
	Kubectl string

	// RiggerBinary is the static rigger binary put in rigger's image. Empty:
	// build ./cmd/rigger of the rigger module found above the working
	// directory into the cache.
	RiggerBinary string
	// BuildSource is the hack directory of the rigger repository, whose
	// kube-build/<version> and etcd-build/<version> modules build
	// Kubernetes and etcd. Empty: found above the working directory. Needed
	// only when a version's binaries are not in the cache yet.
	BuildSource string
	// CacheDir holds what is slow to make. Empty: $RIGGER_CACHE, else
	// /var/cache/rigger.
	CacheDir string
}

// Node is one sandbox node, as a cluster.yml names it and as the machine
// holds it.
type Node struct {
	Name     string // node1, node2, …
	Hostname string // <sandbox>-node1: the node's own hostname (UTS namespace)
	Address  string // 10.231.<subnet>.11, …
	User     string // root
	Port     int    // 22

	// Dir is the node's state directory: its own /etc/kubernetes,
	// /var/lib/docker, /run, … (as etc-kubernetes, var-lib-docker, run),
	// keys, logs and pids.
	Dir string
	// NetNS is the name of the node's network namespace (ip netns list).
	NetNS string
	// Veth is the host end of the node's link into the bridge: down is a
	// partition.
	Veth string
	// DockerSocket is the node's /var/run/docker.sock seen from the host,
	// through the node's /run directory.
	DockerSocket string
	// ContainerdSocket is the node's /run/containerd/containerd.sock (its
	// CRI endpoint) seen from the host.
	ContainerdSocket string
}

// Sandbox is a set of nodes that Up made, as its state file holds it.
type Sandbox struct {
	Name  string
	Nodes []Node

	// KeyPath is the private key that every node's sshd accepts for root.
	KeyPath string
	// KnownHostsPath is a known_hosts file with every node's host key.
	KnownHostsPath string
	// SystemImages maps RKE's system_images keys to the image refs loaded in
	// every node (when Options.Images).
	SystemImages map[string]string
	// ImageArchives maps every loaded image ref to its rootfs tarball in the
	// cache, for engines that are not Docker (ctr images import).
	ImageArchives map[string]string `json:",omitempty"`
	// RiggerBinary is the static rigger binary in rigger's image (when
	// Options.Images), for tests that copy rigger's binary to the nodes
	// (nodebin.Use).
	RiggerBinary string `json:",omitempty"`

	Subnet        int
	Dir           string // state directory
	Bridge        string // bridge in the root network namespace
	BridgeAddress string // the host's address on the bridge
	// Ready is false while Up has not finished: the sandbox may be
	// half-made, and Down removes whatever there is.
	Ready bool
}

// stateFile is what the state file holds: the rest is derived by layout.
type stateFile struct {
	Name          string
	Subnet        int
	Nodes         int
	Ready         bool
	SystemImages  map[string]string `json:",omitempty"`
	ImageArchives map[string]string `json:",omitempty"`
	// RiggerBinary is the static rigger binary in rigger's image (when
	// Options.Images), for tests that copy rigger's binary to the nodes
	// (nodebin.Use).
	RiggerBinary string `json:",omitempty"`
}

// Load returns the sandbox called name from its state file.
func Load(name string) (*Sandbox, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("sandbox name %q: use lower-case letters, digits and dashes", name)
	}
	path := filepath.Join(StateRoot, name, "sandbox.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &NotFoundError{Name: name}
	}
	if err != nil {
		return nil, fmt.Errorf("read sandbox state: %w", err)
	}
	return parseState(b)
}

// NotFoundError is returned by Load when there is no sandbox by that name.
type NotFoundError struct{ Name string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no sandbox named %s: make one with `rigger sandbox up --name %s`", e.Name, e.Name)
}

func parseState(b []byte) (*Sandbox, error) {
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parse sandbox state: %w", err)
	}
	if _, err := (Options{Name: st.Name, Nodes: st.Nodes, Subnet: st.Subnet}).withDefaults(); err != nil || st.Nodes == 0 {
		return nil, fmt.Errorf("parse sandbox state: name %q, %d nodes, subnet %d: not a sandbox this rigger made", st.Name, st.Nodes, st.Subnet)
	}
	s := layout(st.Name, st.Subnet, st.Nodes)
	s.Ready = st.Ready
	s.SystemImages = st.SystemImages
	s.ImageArchives = st.ImageArchives
	return s, nil
}

func (s *Sandbox) marshalState() ([]byte, error) {
	return json.MarshalIndent(stateFile{
		Name:          s.Name,
		Subnet:        s.Subnet,
		Nodes:         len(s.Nodes),
		Ready:         s.Ready,
		SystemImages:  s.SystemImages,
		ImageArchives: s.ImageArchives,
	}, "", "  ")
}

// save writes the state file atomically.
func (s *Sandbox) save() error {
	b, err := s.marshalState()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("write sandbox state: %w", err)
	}
	if err := atomicfile.Write(s.statePath(), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write sandbox state: %w", err)
	}
	return nil
}

// List returns the names of the sandboxes whose state is found.
func List() ([]string, error) {
	entries, err := os.ReadDir(StateRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() || !nameRE.MatchString(e.Name()) {
			continue
		}
		if _, err := os.Stat(filepath.Join(StateRoot, e.Name(), "sandbox.json")); err == nil {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}
