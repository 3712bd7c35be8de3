package doctor

import (
	"bufio"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rigger/rigger/spec/riggermeta"
)

// The checks of the machine, read through its Docker engine (docker info)
// and a one-shot helper container (HostScript).
const (
	CheckDockerVersion = "docker-version"
	CheckCgroupDriver  = "cgroup-driver"
	CheckKernelNetwork = "kernel-network"
	CheckSwap          = "swap"
	CheckResolvConf    = "resolv-conf"
	CheckDisk          = "disk"
	CheckClock         = "clock"
	CheckEtcdData      = "etcd-data"
)

// DockerVersion checks the node's Docker release against those RKE
// supports for the cluster's Kubernetes version (riggermeta.SupportsDocker),
// as rke up and rigger apply do; ignore is --ignore-docker-version.
func DockerVersion(kubernetes, docker string, ignore bool) Result {
	ok, err := riggermeta.SupportsDocker(kubernetes, docker)
	want := "a Docker release RKE supports with Kubernetes " + kubernetes + " (" + strings.Join(riggermeta.DockerVersions(kubernetes), ", ") + ")"
	switch {
	case err == nil && ok:
		return Passed("Docker " + docker)
	case ignore:
		return Warned(want, "Docker "+docker, "apply runs only with --ignore-docker-version; upgrade Docker on the node")
	case err != nil:
		return Failed(want, fmt.Sprintf("Docker %s: %v", docker, err), "upgrade Docker on the node, or run apply with --ignore-docker-version")
	}
	return Failed(want, "Docker "+docker, "upgrade Docker on the node, or run apply with --ignore-docker-version (Unsupported Docker version found)")
}

// CgroupDriver compares the engine's cgroup driver with the one the
// kubelet is given (its --cgroup-driver, cgroupfs when it has none): a
// kubelet whose driver differs does not start ("misconfiguration: kubelet
// cgroup driver: … is different from docker cgroup driver: …").
func CgroupDriver(docker, version, kubelet string) Result {
	if kubelet == "" {
		kubelet = "cgroupfs"
	}
	found := fmt.Sprintf("Docker's cgroup driver %s (cgroup %s)", docker, cmpOr(version, "v1"))
	if docker == "" || docker == kubelet {
		return Passed(found)
	}
	return Failed("the kubelet's cgroup driver ("+kubelet+") to be Docker's", found,
		fmt.Sprintf("set services.kubelet.extra_args: {cgroup-driver: %s} in cluster.yml, or configure Docker with exec-opts native.cgroupdriver=%s (misconfiguration: kubelet cgroup driver: %q is different from docker cgroup driver: %q)",
			docker, kubelet, kubelet, docker))
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// HostScript is the shell script (busybox's sh, cat, stat) that the
// helper container runs to read the machine: it prints one section per
// thing read, each headed "## name". The host's /etc is mounted at
// /host/etc, its /etc/resolv.conf (a symbolic link followed) at
// /host/resolv.conf, Docker's root at /host/docker and /var/lib at
// /host/var/lib, all read-only; $RESOLV is the resolv.conf pods get, one
// of those files. /proc and the sysctls are the node's own
// (the container shares its network namespace). $OVERLAY lists the
// addresses to ping through the overlay network, with small packets and
// then with packets as large as flannel's VXLAN device takes (Overlay);
// $DNS is the cluster DNS Service's address to ask for $DNS_NAME (DNS).
const HostScript = `echo '## swaps'; cat /proc/swaps
echo '## modules'; cat /proc/modules
echo '## ip_forward'; cat /proc/sys/net/ipv4/ip_forward
echo '## bridge-nf-call-iptables'; cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null
echo '## resolv.conf'; cat "$RESOLV"
echo '## cni'; ls -1 /host/etc/cni/net.d 2>/dev/null
echo '## statfs docker'; stat -f -c '%S %a %b %d %c' /host/docker
echo '## statfs kubelet'; [ -d /host/var/lib/kubelet ] && stat -f -c '%S %a %b %d %c' /host/var/lib/kubelet
echo '## dns'; [ -n "$DNS" ] && timeout 5 nslookup "$DNS_NAME" "$DNS" 2>&1
echo '## etcd-data'; [ -d /host/var/lib/etcd/member ] && echo member
echo '## overlay'; mtu=$(cat /sys/class/net/flannel.1/mtu 2>/dev/null); PEERS=$OVERLAY
` + pingPeers + `echo '## end'
`

// PodScript is the script a helper container in a probe pod's network
// namespace runs: it pings the addresses of $PEERS, small packets and
// then packets as large as the pod's interface takes, and asks the
// cluster DNS at $DNS for $DNS_NAME as the pod's own lookups go. ParseHost
// reads its output into Overlay, OverlayMTU and DNS.
const PodScript = `echo '## overlay'; mtu=$(cat /sys/class/net/eth0/mtu 2>/dev/null)
` + pingPeers + `echo '## dns'; [ -n "$DNS" ] && timeout 5 nslookup "$DNS_NAME" "$DNS" 2>&1
echo '## end'
`

// pingPeers prints $mtu and then, for each address of $PEERS, whether it
// answered small pings and pings of $mtu bytes ("ok"), small ones only
// ("small") or none ("no").
const pingPeers = `echo "mtu ${mtu:-0}"
for ip in $PEERS; do (if ! ping -c 1 -W 2 "$ip" >/dev/null 2>&1; then echo "$ip no"
  elif [ -n "$mtu" ] && ! ping -c 2 -W 2 -s $((mtu - 28)) "$ip" >/dev/null 2>&1; then echo "$ip small"
  else echo "$ip ok"; fi) & done; wait
`

// Host is what HostScript read of a machine.
type Host struct {
	// Swaps are the swap devices and files in use.
	Swaps []string
	// Modules are the kernel modules loaded.
	Modules []string
	// IPForward and BridgeNF are the sysctls net.ipv4.ip_forward and
	// net.bridge.bridge-nf-call-iptables ("" when absent: br_netfilter
	// not loaded).
	IPForward, BridgeNF string
	// Nameservers are those of the node's /etc/resolv.conf.
	Nameservers []string
	// CNI are the files in the node's /etc/cni/net.d.
	CNI []string
	// Overlay says of each address of $OVERLAY whether it answered a
	// ping: "ok", "small" (small packets only, not those of OverlayMTU)
	// or "no".
	Overlay map[string]string
	// OverlayMTU is the MTU of the node's flannel VXLAN device (0: none).
	OverlayMTU int
	// EtcdData says that /var/lib/etcd holds an etcd member's data.
	EtcdData bool
	// DNS is what nslookup said of $DNS_NAME at $DNS ("" when not asked).
	DNS string
	// Disks are the free space of Docker's root and /var/lib/kubelet, by
	// name (docker, kubelet); a directory that does not exist is absent.
	Disks map[string]Disk
}

// Disk is the free space of one file system.
type Disk struct {
	FreeBytes, TotalBytes   uint64
	FreeInodes, TotalInodes uint64
}

// ParseHost reads HostScript's output. It refuses output that did not
// reach its end (the script was cut short).
func ParseHost(out []byte) (*Host, error) {
	h := &Host{Disks: map[string]Disk{}, Overlay: map[string]string{}}
	section, ended := "", false
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, ok := strings.CutPrefix(line, "## "); ok {
			section = name
			ended = name == "end"
			continue
		}
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		switch section {
		case "swaps":
			if f[0] != "Filename" {
				h.Swaps = append(h.Swaps, f[0])
			}
		case "modules":
			h.Modules = append(h.Modules, f[0])
		case "ip_forward":
			h.IPForward = f[0]
		case "bridge-nf-call-iptables":
			h.BridgeNF = f[0]
		case "cni":
			h.CNI = append(h.CNI, f[0])
		case "dns":
			h.DNS += line + "\n"
		case "etcd-data":
			h.EtcdData = f[0] == "member"
		case "overlay":
			switch {
			case len(f) == 2 && f[0] == "mtu":
				h.OverlayMTU, _ = strconv.Atoi(f[1])
			case len(f) == 2:
				h.Overlay[f[0]] = f[1]
			}
		case "resolv.conf":
			if len(f) >= 2 && f[0] == "nameserver" {
				h.Nameservers = append(h.Nameservers, f[1])
			}
		default:
			if name, ok := strings.CutPrefix(section, "statfs "); ok && len(f) == 5 {
				var n [5]uint64
				for i := range f {
					v, err := strconv.ParseUint(f[i], 10, 64)
					if err != nil {
						return nil, fmt.Errorf("statfs %s: %q is not a number", name, f[i])
					}
					n[i] = v
				}
				h.Disks[name] = Disk{FreeBytes: n[0] * n[1], TotalBytes: n[0] * n[2], FreeInodes: n[3], TotalInodes: n[4]}
			}
		}
	}
	if !ended {
		return nil, fmt.Errorf("the machine's read ended early")
	}
	return h, nil
}

// KernelNetwork checks what the network plugins need of the kernel, as
// warnings: they do not stop a node from joining, and a plugin may set
// them itself. net.ipv4.ip_forward=1 is what kubeadm's preflight demands
// (flannel's bridge plugin enables forwarding on its own interfaces,
// others do not); br_netfilter with bridge-nf-call-iptables=1 is what
// Services need between pods on one node's bridge.
func KernelNetwork(h *Host) Result {
	var rs []Result
	if h.IPForward != "1" {
		rs = append(rs, Warned("net.ipv4.ip_forward = 1", "net.ipv4.ip_forward = "+cmpOr(h.IPForward, "(absent)"),
			"sysctl -w net.ipv4.ip_forward=1, and set it in /etc/sysctl.d/ to keep it after a reboot"))
	}
	switch {
	case h.BridgeNF == "" && !slices.Contains(h.Modules, "br_netfilter"):
		rs = append(rs, Warned("the br_netfilter module loaded, net.bridge.bridge-nf-call-iptables = 1", "br_netfilter not loaded",
			"modprobe br_netfilter, add it to /etc/modules-load.d/, and sysctl -w net.bridge.bridge-nf-call-iptables=1"))
	case h.BridgeNF != "" && h.BridgeNF != "1":
		rs = append(rs, Warned("net.bridge.bridge-nf-call-iptables = 1", "net.bridge.bridge-nf-call-iptables = "+h.BridgeNF,
			"sysctl -w net.bridge.bridge-nf-call-iptables=1, and set it in /etc/sysctl.d/"))
	}
	if len(rs) == 0 {
		return Passed("ip_forward and bridge-nf-call-iptables on")
	}
	return Worst(rs...)
}

// Swap warns of swap in use: RKE's kubelet runs with fail-swap-on=false,
// so it starts, but its memory accounting and evictions assume no swap.
func Swap(h *Host) Result {
	if len(h.Swaps) == 0 {
		return Passed("no swap")
	}
	return Warned("no swap", "swap on "+strings.Join(h.Swaps, ", "),
		"swapoff -a and remove swap from /etc/fstab: the kubelet's memory evictions assume none")
}

// ResolvConf fails a node whose resolv.conf for pods (/etc/resolv.conf,
// or the kubelet's resolv-conf) has only loopback nameservers
// (systemd-resolved's 127.0.0.53, a local dnsmasq): the kubelet hands
// that file to the pods and CoreDNS forwards to it, where
// such an address is the pod's own loopback ("Loop … detected").
func ResolvConf(h *Host) Result {
	if len(h.Nameservers) == 0 {
		return Warned("a nameserver in the resolv.conf pods get", "no nameserver", "add the network's nameserver to the node's /etc/resolv.conf, or the file of the kubelet's resolv-conf")
	}
	for _, ns := range h.Nameservers {
		if a, err := netip.ParseAddr(ns); err != nil || !a.IsLoopback() {
			return Passed("nameservers " + strings.Join(h.Nameservers, ", "))
		}
	}
	return Failed("a nameserver that pods can reach", "only loopback nameservers in the resolv.conf pods get: "+strings.Join(h.Nameservers, ", "),
		"point the kubelet at the real resolvers (services.kubelet.extra_args: {resolv-conf: /run/systemd/resolve/resolv.conf} with systemd-resolved), or list them in /etc/resolv.conf (CoreDNS: Loop … detected)")
}

// warnFree is how much free space (or inodes) a file system should have
// besides what the kubelet's evictions keep: below it, a warning.
const warnFree = 0.15

// Kubelet's default hard eviction thresholds of the node's file system
// (nodefs.available<10%, nodefs.inodesFree<5%).
const (
	defaultEvictSpace  = 0.10
	defaultEvictInodes = 0.05
)

// DiskSpace checks the free space and inodes of Docker's root and the
// kubelet's directory: a failure below the kubelet's hard eviction
// thresholds (eviction, its --eviction-hard; the kubelet's defaults when
// empty or not a percentage), where it evicts pods and reports
// DiskPressure; a warning below warnFree.
func DiskSpace(h *Host, eviction string) Result {
	evictSpace := evictionPercent(eviction, "nodefs.available", defaultEvictSpace)
	evictInodes := evictionPercent(eviction, "nodefs.inodesFree", defaultEvictInodes)
	var rs []Result
	for _, name := range []string{"docker", "kubelet"} {
		d, ok := h.Disks[name]
		if !ok || d.TotalBytes == 0 {
			continue
		}
		where := map[string]string{"docker": "Docker's root", "kubelet": "/var/lib/kubelet"}[name]
		space := float64(d.FreeBytes) / float64(d.TotalBytes)
		inodes := 1.0
		if d.TotalInodes > 0 {
			inodes = float64(d.FreeInodes) / float64(d.TotalInodes)
		}
		found := fmt.Sprintf("%s: %.0f%% space free (%s), %.0f%% inodes free", where, 100*space, bytes(d.FreeBytes), 100*inodes)
		fix := "free space on the node (docker system prune, old logs) or grow the file system (DiskPressure, no space left on device)"
		switch {
		case space < evictSpace || inodes < evictInodes:
			rs = append(rs, Failed(fmt.Sprintf("more free than the kubelet's eviction thresholds (nodefs.available<%.0f%%, nodefs.inodesFree<%.0f%%)", 100*evictSpace, 100*evictInodes), found, fix))
		case min(space, inodes) < warnFree:
			rs = append(rs, Warned(fmt.Sprintf("at least %.0f%% free", 100*warnFree), found, fix))
		default:
			rs = append(rs, Passed(found))
		}
	}
	return Worst(rs...)
}

// evictionPercent is the threshold of signal in a kubelet's
// --eviction-hard ("memory.available<100Mi,nodefs.available<10%"), as a
// fraction; def when it has none or it is not a percentage.
func evictionPercent(eviction, signal string, def float64) float64 {
	for _, part := range strings.Split(eviction, ",") {
		v, ok := strings.CutPrefix(strings.TrimSpace(part), signal+"<")
		if !ok {
			continue
		}
		if pct, ok := strings.CutSuffix(v, "%"); ok {
			if f, err := strconv.ParseFloat(pct, 64); err == nil && f >= 0 && f <= 100 {
				return f / 100
			}
		}
	}
	return def
}

func bytes(n uint64) string {
	const gib = 1 << 30
	if n >= gib {
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// MaxClockSkew is the most two nodes' clocks may differ: etcd warns
// beyond 1 s ("the clock difference against peer … is too high"), and
// certificates just issued are not yet valid on a node behind.
const MaxClockSkew = time.Second

// Clock compares a node's clock with the median of all nodes' (offset
// and median are each node's clock minus rigger's, read with docker info;
// uncertainty is half the time the read took).
func Clock(offset, uncertainty, median time.Duration) Result {
	skew := offset - median
	if skew < 0 {
		skew = -skew
	}
	found := fmt.Sprintf("%s from the other nodes (± %s)", skew.Round(time.Millisecond), uncertainty.Round(time.Millisecond))
	if skew-uncertainty > MaxClockSkew {
		return Failed("within "+MaxClockSkew.String()+" of the other nodes", found,
			"run time synchronization (chrony, systemd-timesyncd) on every node (the clock difference against peer … is too high)")
	}
	return Passed(found)
}

// EtcdData checks an etcd node's data directory against the membership
// (member: whether the node's member is in it): data left by a member
// that is no longer one (a node removed and added again, an earlier
// install) makes the new etcd refuse to start ("member … has already been
// bootstrapped") or start a cluster of its own.
func EtcdData(data, member bool) Result {
	switch {
	case !data:
		return Passed("no etcd data yet")
	case member:
		return Passed("etcd data of a member")
	}
	return Failed("no etcd data on a node that is not a member", "/var/lib/etcd holds a member's data, and the node is not a member of the etcd cluster: etcd will not join (member … has already been bootstrapped)",
		"if this node's data is not needed (the cluster runs on the other members), move /var/lib/etcd aside on the node, then rigger apply adds it as a new member")
}
