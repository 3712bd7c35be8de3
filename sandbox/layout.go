package sandbox

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Fixed places on the machine. They are constants, not settings: Load and
// Down find a sandbox from its name alone.
const (
	// StateRoot holds one directory per sandbox: its state file, keys, the
	// node directories that are mounted inside the nodes, logs and pids.
	StateRoot = "/var/lib/rigger-sandbox"
	// nsRoot holds the files that keep the nodes' mount and UTS namespaces
	// alive. It is a private bind mount of itself, as unshare(1) requires.
	nsRoot = "/run/rigger-sandbox"
	// netnsDir is where ip-netns(8) keeps named network namespaces.
	netnsDir = "/run/netns"
	// cgroupRoot is the cgroup (v1, every hierarchy) under which the nodes'
	// engines put their containers: <cgroupRoot>/<name>/<node>/<id>.
	cgroupRoot = "/rigger-sandbox"

	// DefaultName is the sandbox that `rigger sandbox up` makes.
	DefaultName = "rigger"
	// DefaultNodes is the number of nodes of a sandbox.
	DefaultNodes = 3
	// MaxNodes bounds a sandbox: addresses run from .11 up in one /24.
	MaxNodes = 64
	// User is the SSH user of every node.
	User = "root"
	// SSHPort is where every node's sshd listens, on the node's address.
	SSHPort = 22
	// DockerSocket is the engine's socket inside a node.
	DockerSocket = "/var/run/docker.sock"
	// ContainerdSocket is the node's containerd socket inside a node: the
	// kubelet's CRI endpoint (unix:///run/containerd/containerd.sock) and
	// the containerd the node's engine uses.
	ContainerdSocket = "/run/containerd/containerd.sock"
	// CNIBinDir is where a node has the CNI plugins: its own directory,
	// writable, as on a real machine.
	CNIBinDir = "/opt/cni/bin"
	// CNIConfDir is where a node has its CNI network configuration: its
	// own directory, writable.
	CNIConfDir = "/etc/cni/net.d"

	// rangePrefix is the whole sandbox range: an unreachable route covers it.
	rangePrefix = "10.231.0.0/16"
	// firstHost is the last octet of node1's address.
	firstHost = 11
	// bridgeHost is the last octet of the bridge's (the host's) address.
	bridgeHost = 1

	netnsPrefix  = "rigger-sandbox-"
	bridgePrefix = "rigsb"
)

// nameRE is what a sandbox name may be: it becomes part of directory,
// namespace and host names.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}[a-z0-9]$|^[a-z]$`)

// withDefaults returns opts with its zero values replaced by the defaults,
// and an error that says what to change when opts cannot work.
func (o Options) withDefaults() (Options, error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Nodes == 0 {
		o.Nodes = DefaultNodes
	}
	if !nameRE.MatchString(o.Name) {
		return o, fmt.Errorf("sandbox name %q: use 1 to 32 lower-case letters, digits and dashes, starting with a letter", o.Name)
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return o, fmt.Errorf("%d nodes: a sandbox has 1 to %d", o.Nodes, MaxNodes)
	}
	if o.Subnet < 0 || o.Subnet > 255 {
		return o, fmt.Errorf("subnet %d: the third octet of 10.231.<subnet>.0/24 is 0 to 255", o.Subnet)
	}
	return o, nil
}

// layout names everything a sandbox makes. It is a pure function of the
// sandbox's name, subnet and node count, so that the state file needs to
// hold only those.
func layout(name string, subnet, nodes int) *Sandbox {
	dir := filepath.Join(StateRoot, name)
	s := &Sandbox{
		Name:           name,
		Subnet:         subnet,
		Dir:            dir,
		Bridge:         bridgeName(subnet),
		BridgeAddress:  nodeAddr(subnet, bridgeHost).String(),
		KeyPath:        filepath.Join(dir, "ssh", "id_ed25519"),
		KnownHostsPath: filepath.Join(dir, "ssh", "known_hosts"),
	}
	for i := 1; i <= nodes; i++ {
		n := "node" + strconv.Itoa(i)
		ndir := filepath.Join(dir, n)
		s.Nodes = append(s.Nodes, Node{
			Name:             n,
			Hostname:         name + "-" + n,
			Address:          nodeAddr(subnet, firstHost-1+i).String(),
			User:             User,
			Port:             SSHPort,
			Dir:              ndir,
			NetNS:            netnsPrefix + name + "-" + n,
			Veth:             fmt.Sprintf("%s%dn%d", bridgePrefix, subnet, i),
			DockerSocket:     filepath.Join(ndir, "run", "docker.sock"),
			ContainerdSocket: filepath.Join(ndir, "run", "containerd", "containerd.sock"),
		})
	}
	return s
}

func bridgeName(subnet int) string { return fmt.Sprintf("%s%d", bridgePrefix, subnet) }

func nodeAddr(subnet, host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 231, byte(subnet), byte(host)})
}

// subnetPrefix is 10.231.<subnet>.0/24.
func subnetPrefix(subnet int) netip.Prefix {
	return netip.PrefixFrom(nodeAddr(subnet, 0), 24)
}

// nodeMounts are the paths a node owns: each is bind-mounted, inside the
// node's mount namespace, from a directory of the node's own. The name of
// that directory is the path with slashes as dashes (etc-kubernetes).
func nodeMounts() []string {
	return []string{
		"/etc/kubernetes",
		"/etc/cni",
		"/etc/docker",
		"/etc/ceph",
		"/opt/cni",
		"/opt/rke",
		"/var/lib/docker",
		"/var/lib/containerd",
		"/var/lib/etcd",
		"/var/lib/kubelet",
		"/var/lib/cni",
		"/var/lib/calico",
		"/var/lib/rancher",
		// cri-dockerd's state (pod sandbox checkpoints), bound into the
		// kubelet: each node's own.
		"/var/lib/cri-dockerd",
		"/var/log/containers",
		"/var/log/pods",
		// root's home: a real machine's is its own. The host's would make
		// every command a test runs on a node over SSH source the host's
		// shell start-up files (a stale pyenv lock there held each one 60 s).
		"/root",
		// /run last: the node's sshd, engine and sockets live there.
		"/run",
	}
}

// sharedMounts are the node paths whose mounts are shared (mount
// propagation) inside the node, as systemd makes every mount of a real
// host: the kubelet binds /var/lib/kubelet and /var/lib/rancher with
// ":shared" and /var/lib/docker with ":rslave", which Docker refuses unless
// the source is a shared mount.
func sharedMounts() []string {
	return []string{"/var/lib/docker", "/var/lib/kubelet", "/var/lib/rancher"}
}

// HostPath is where the node's file or directory p, under one of the
// directories the node has of its own (nodeMounts: /etc/kubernetes,
// /etc/cni, /var/lib/etcd, …), is on the host: tests break a node's files
// through it. "" for a path the node shares with the host.
func (n Node) HostPath(p string) string {
	p = filepath.Clean(p)
	for _, m := range nodeMounts() {
		if rest, ok := strings.CutPrefix(p, m); ok && (rest == "" || rest[0] == '/') {
			return filepath.Join(n.mountDir(m), rest)
		}
	}
	return ""
}

// mountDir is the directory of node n that is mounted over path inside it.
func (n Node) mountDir(path string) string {
	return filepath.Join(n.Dir, mountDirName(path))
}

func mountDirName(path string) string {
	b := []byte(path[1:])
	for i, c := range b {
		if c == '/' {
			b[i] = '-'
		}
	}
	return string(b)
}

// SSHDConfigPath is the node's sshd_config, read when its sshd starts.
func (n Node) SSHDConfigPath() string { return filepath.Join(n.Dir, "ssh", "sshd_config") }

// Paths of a node's files in its state directory (host side).
func (n Node) hostKeyPath() string { return filepath.Join(n.Dir, "ssh", "ssh_host_ed25519_key") }
func (n Node) servicesDir() string { return filepath.Join(n.Dir, "services") }
func (n Node) logDir() string      { return filepath.Join(n.Dir, "log") }
func (n Node) netnsPath() string   { return filepath.Join(netnsDir, n.NetNS) }

// containerdConfigPath is node n's containerd configuration (host side;
// the node sees the host's files outside the paths it owns).
func (n Node) containerdConfigPath() string {
	return filepath.Join(n.Dir, "containerd", "config.toml")
}

// CNIConfigDir is node n's CNIConfDir (/etc/cni/net.d) seen from the host:
// where the network plugin writes the node's CNI configuration, for tests
// that take it away.
func (n Node) CNIConfigDir() string { return n.cniConfDir() }

// cniBinDir and cniConfDir are node n's CNIBinDir and CNIConfDir, host
// side (inside the node's /opt/cni and /etc/cni).
func (n Node) cniBinDir() string  { return filepath.Join(n.mountDir("/opt/cni"), "bin") }
func (n Node) cniConfDir() string { return filepath.Join(n.mountDir("/etc/cni"), "net.d") }

// pidFile is where the service script of svc writes the service's pid.
func (n Node) pidFile(svc string) string { return filepath.Join(n.Dir, "pids", svc+".pid") }

// nsFiles are the files that keep the node's mount and UTS namespaces.
func (s *Sandbox) nsDir() string           { return filepath.Join(nsRoot, s.Name) }
func (s *Sandbox) mntNSPath(n Node) string { return filepath.Join(s.nsDir(), n.Name+".mnt") }

// MountNS is node's mount namespace (for nsenter --mount=): a mount made
// there is the node's alone.
func (s *Sandbox) MountNS(node string) (string, error) {
	n, err := s.nodeByName(node)
	if err != nil {
		return "", err
	}
	return s.mntNSPath(n), nil
}
func (s *Sandbox) utsNSPath(n Node) string    { return filepath.Join(s.nsDir(), n.Name+".uts") }
func (s *Sandbox) cgroupNSPath(n Node) string { return filepath.Join(s.nsDir(), n.Name+".cgroup") }
func (s *Sandbox) statePath() string          { return filepath.Join(s.Dir, "sandbox.json") }
func (s *Sandbox) initDir() string            { return filepath.Join(s.Dir, "init") }
func (s *Sandbox) cgroupPath(n Node) string   { return cgroupRoot + "/" + s.Name + "/" + n.Name }
func (s *Sandbox) runcWrapperPath() string    { return filepath.Join(s.Dir, "bin", "runc-sandbox") }
func (s *Sandbox) authorizedKeysPath() string { return filepath.Join(s.Dir, "ssh", "authorized_keys") }
func (s *Sandbox) nodeByName(name string) (Node, error) {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	names := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		names[i] = n.Name
	}
	return Node{}, fmt.Errorf("sandbox %s has no node %q (it has %v)", s.Name, name, names)
}
