package doctor

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/observe"
)

// The checks of a node in Kubernetes, and of the cluster as a whole.
const (
	CheckNodeRegistered = "node-registered"
	CheckCNI            = "cni"
	CheckNodeReady      = "node-ready"

	CheckClusterYML    = "cluster-yml"
	CheckPKI           = "pki"
	CheckKubernetesAPI = "kubernetes-api"
	CheckStaleNodes    = "stale-nodes"
)

// EtcdMember checks the etcd member of a node whose peer URL is peerURL
// in the membership a member listed (nil, with listErr, when none
// answered).
func EtcdMember(members []etcdmember.Member, listed bool, listErr error, peerURL string) Result {
	if !listed {
		found := "no etcd member answered"
		if listErr != nil {
			found += ": " + listErr.Error()
		}
		return Failed("etcd to answer", found,
			"start etcd on the etcd nodes (rigger apply); if a majority of members is lost, restore a snapshot (rigger snapshot restore, docs/etcd-snapshots.md)")
	}
	m := etcdmember.Find(members, peerURL)
	switch {
	case m == nil:
		return Failed("a member with peer URL "+peerURL, "not a member of the etcd cluster",
			"rigger apply adds it; if its etcd exits with \"member … has already been bootstrapped\", remove the node's stale /var/lib/etcd first")
	case !m.Healthy:
		return Failed("its member healthy", "member "+m.String()+": "+m.Error,
			"check the etcd container's logs on the node (docker logs etcd), its disk and clock; etcd's ports 2379 and 2380 between the etcd nodes")
	}
	var ahead uint64
	for _, o := range members {
		if o.Healthy {
			ahead = max(ahead, o.Applied)
		}
	}
	if ahead > m.Applied+maxEtcdLag {
		return Warned(fmt.Sprintf("its member caught up (within %d entries of the others)", maxEtcdLag),
			// No index in the text: status.yml would change with each read.
			fmt.Sprintf("member %s is more than %d entries behind the most advanced member", m, maxEtcdLag),
			"a member that cannot keep up has a slow disk (the etcd-disk check), a slow or lossy link to the leader (port 2380), or is still receiving a snapshot after a restart: docker logs etcd on the node")
	}
	return Passed("member " + m.String() + " healthy")
}

// maxEtcdLag is how many raft entries an etcd member may be behind the
// most advanced one when their statuses are read together.
const maxEtcdLag = 1000

// Registered checks that the machine at address has its Node, and only
// one (link: which Node is whose); kubeletLogs are the kubelet's last lines
// when it has none.
func Registered(address, hostname string, link *observe.Linkage, kubeletLogs string) Result {
	for _, d := range link.Duplicates {
		if d.Address == address {
			return Failed("one Node for this machine",
				fmt.Sprintf("Nodes %s claim this machine; %s counts as its own", strings.Join(append([]string{d.Owner}, d.Others...), ", "), d.Owner),
				fmt.Sprintf("delete the others (kubectl delete node %s), or set rigger.stale_nodes: delete and apply", strings.Join(d.Others, " ")))
		}
	}
	n := link.Owned[address]
	if n == nil {
		found := "no Node for this machine: its kubelet has not registered"
		if kubeletLogs != "" {
			found += "; the kubelet's last lines:\n" + lastLines(kubeletLogs, logLines)
		}
		return Failed("a Node named "+hostname, found,
			"the kubelet's lines say why; most often its hostname (hostname_override) or its certificate's names are not the node's, or it cannot reach the API server through nginx-proxy (127.0.0.1:6443). If a cloud controller deleted the Node (\"Deleting Node … because it's not present according to cloud provider\"), check cloud_provider and the machine's provider ID")
	}
	return Passed("Node " + n.Name)
}

// Ready checks the Ready condition of the machine's Node.
func Ready(n *corev1.Node) Result {
	if n == nil {
		return Skipped("no Node")
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return Passed("Node " + n.Name + " Ready")
		}
		found := fmt.Sprintf("Node %s Ready=%s: %s %s", n.Name, c.Status, c.Reason, c.Message)
		fix := "the kubelet's logs on the node (docker logs kubelet) say why"
		switch msg := strings.ToLower(c.Message); {
		case strings.Contains(msg, "cni") || strings.Contains(msg, "network plugin"):
			fix = "the network plugin is not ready on the node (cni config uninitialized): check its pod there (kubectl -n kube-system get pods -o wide) and its install-cni container's logs"
		case c.Status == corev1.ConditionUnknown:
			fix = "the kubelet stopped posting its status: check that it runs on the node and reaches the API server (docker logs kubelet, docker logs nginx-proxy)"
		}
		return Failed("Node "+n.Name+" Ready", found, fix)
	}
	return Failed("Node "+n.Name+" Ready", "Node "+n.Name+" has no Ready condition yet", "wait for the kubelet's first status, or read its logs (docker logs kubelet)")
}

// CheckNodeUpdates is the check of how often the node's Node is updated.
const CheckNodeUpdates = "node-updates"

// NodeUpdates are the updates of one Node seen while doctor watched.
type NodeUpdates struct {
	// Count is the number of updates, in Window.
	Count  int
	Window time.Duration
	// Managers count the updates by the field manager that made them
	// (the newest entry of the Node's managedFields).
	Managers map[string]int
}

// MaxNodeUpdates is the number of updates of a Node in a minute above
// which controllers are taken to fight over it. A kubelet updates its Node
// when its status changes and every 5 minutes otherwise (its heartbeats go
// to a Lease); the Node's controllers update it now and then.
const MaxNodeUpdates = 20

// Updates checks that the node's Node (name) is not updated many times a
// minute, as when two controllers fight over a label, a taint or its
// status; or, as in the field reports, when two Node objects for one
// machine make the API server loop on updates until it runs out of memory.
func Updates(name string, u NodeUpdates) Result {
	if u.Window <= 0 {
		return Skipped("the Nodes were not watched")
	}
	perMinute := float64(u.Count) * float64(time.Minute) / float64(u.Window)
	found := fmt.Sprintf("Node %s updated %d times in %s", name, u.Count, u.Window.Round(100*time.Millisecond))
	// Two or three updates close together are a change going through
	// its controllers (a taint set, then the status).
	if perMinute <= MaxNodeUpdates || u.Count < 4 {
		return Passed(found)
	}
	var by []string
	for m, n := range u.Managers {
		by = append(by, fmt.Sprintf("%s (%d)", m, n))
	}
	slices.Sort(by)
	return Warned(fmt.Sprintf("at most %d updates of the Node a minute", MaxNodeUpdates),
		fmt.Sprintf("%s (%.0f a minute), by %s", found, perMinute, strings.Join(by, ", ")),
		"controllers fight over the Node, each writing back what the other changed: stop or reconfigure the one that should not manage it (kubectl get node "+name+" --show-managed-fields -o yaml shows which fields each manager owns). Two Node objects for one machine do it too (the node-registered check)")
}

// CNI checks that the network plugin (plugin, "" or "none" for none) has
// written its configuration on the node (conf: the files in
// /etc/cni/net.d) and that its pod there runs (pods: those of the plugin on
// the node; nil when they could not be listed).
func CNI(plugin string, conf []string, pods []corev1.Pod) Result {
	if plugin == "" || plugin == "none" {
		return Skipped("no network plugin")
	}
	var rs []Result
	// What the kubelet's runtime (cri-dockerd, containerd) loads.
	conf = slices.DeleteFunc(slices.Clone(conf), func(f string) bool {
		return !strings.HasSuffix(f, ".conf") && !strings.HasSuffix(f, ".conflist") && !strings.HasSuffix(f, ".json")
	})
	if len(conf) == 0 {
		rs = append(rs, Failed("the network plugin's configuration in /etc/cni/net.d", "no network configuration in /etc/cni/net.d: network plugin not ready: cni config uninitialized",
			"the "+plugin+" pod on the node writes it when it starts: check that it runs (kubectl -n kube-system get pods -o wide) and its install-cni container's logs; deleting the pod makes it write the configuration again"))
	}
	if pods != nil {
		running := 0
		var states []string
		for _, p := range pods {
			if p.Status.Phase == corev1.PodRunning && podReady(&p) {
				running++
				continue
			}
			states = append(states, p.Name+" "+string(p.Status.Phase))
		}
		switch {
		case len(pods) == 0:
			rs = append(rs, Failed("a "+plugin+" pod on the node", "no "+plugin+" pod on the node",
				"check the plugin's DaemonSet (kubectl -n kube-system describe daemonset) and the node's taints"))
		case running == 0:
			rs = append(rs, Failed("the "+plugin+" pod on the node Ready", strings.Join(states, ", "),
				"kubectl -n kube-system describe pod and logs of the pod say why"))
		}
	}
	if len(rs) == 0 {
		return Passed(plugin + " configured: " + strings.Join(conf, ", "))
	}
	return Worst(rs...)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Stale checks for Nodes that no machine of cluster.yml owns.
func Stale(link *observe.Linkage, policy string) Result {
	if len(link.Stale) == 0 {
		return Passed("every Node is a machine's")
	}
	var found []string
	for _, s := range link.Stale {
		found = append(found, fmt.Sprintf("%s (%s, Ready=%s)", s.Name, s.Reason, s.Ready))
	}
	fix := "kubectl delete node NAME for each, or set rigger.stale_nodes: delete in cluster.yml and apply"
	if policy == "delete" {
		fix = "rigger apply deletes them (rigger.stale_nodes: delete)"
	}
	return Warned("no Node without a machine", "stale Nodes: "+strings.Join(found, "; "), fix)
}

// CheckEvents is the check of a Node's recent Events.
const CheckEvents = "events"

// nodeEventReasons are the reasons of the Node Events worth showing:
// what explains a Node deleted, NotReady or under pressure. Other
// warnings (a kubelet's "cgroup v1 support is in maintenance mode") are
// not about a node joining.
var nodeEventReasons = map[string]bool{
	"NodeNotReady": true, "RemovingNode": true, "DeletingNode": true, "DeletingAllPods": true, "Rebooted": true,
	"NodeHasDiskPressure": true, "NodeHasInsufficientMemory": true, "NodeHasInsufficientPID": true,
	"EvictionThresholdMet": true, "SystemOOM": true, "NodeNotSchedulable": true, "RegisteredNode": true,
	"FreeDiskSpaceFailed": true, "ImageGCFailed": true, "ContainerGCFailed": true, "InvalidDiskCapacity": true,
	"KubeletSetupFailed": true,
}

// maxEvents is how many Events a finding lists (the newest).
const maxEvents = 5

// Events warns of the Node Events since a time that explain a Node
// deleted, NotReady or under pressure (a cloud controller's "Deleting
// Node … because it's not present according to cloud provider", the node
// controller's NodeNotReady, evictions). names are the Node's names (the
// machine's hostname, and its Node's when it differs); events those
// listed, newest last. readySince is when the Node last became Ready
// (zero when it is not): the NotReady and registration before it are
// those of its start, not worth a warning.
func Events(names []string, events []corev1.Event, since, readySince time.Time) Result {
	var lines []string
	for _, e := range events {
		if e.InvolvedObject.Kind != "Node" || !slices.Contains(names, e.InvolvedObject.Name) || eventTime(&e).Before(since) {
			continue
		}
		if !nodeEventReasons[e.Reason] {
			continue
		}
		if (e.Reason == "NodeNotReady" || e.Reason == "RegisteredNode") && eventTime(&e).Before(readySince) {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s %s: %s", eventTime(&e).UTC().Format("15:04:05"), e.Reason, strings.TrimSpace(e.Message)))
	}
	if len(lines) == 0 {
		return Passed("no Event of the Node since " + since.UTC().Format("15:04:05"))
	}
	found := fmt.Sprintf("%d Events of the Node since %s", len(lines), since.UTC().Format("15:04:05"))
	if len(lines) > maxEvents {
		lines = lines[len(lines)-maxEvents:]
		found += fmt.Sprintf(", the last %d", maxEvents)
	}
	return Warned("no Event that explains a Node deleted, NotReady or under pressure", found+":\n"+strings.Join(lines, "\n"),
		"the Events say what happened: a Node deleted and registered again (RemovingNode, RegisteredNode) is often a cloud controller (cloud_provider) or a second machine with the same hostname; NodeNotReady is the kubelet not posting its status")
}

// eventTime is when an Event last happened.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// ReadySince is when the Node's Ready condition last became True; zero
// when it is not True.
func ReadySince(n *corev1.Node) time.Time {
	if n == nil {
		return time.Time{}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// CheckOverlay is the check of the overlay network between a node and
// the others.
const CheckOverlay = "overlay"

// OverlayPeer is another node's end of the overlay network: the address
// of its VXLAN device (flannel's flannel.1 holds its pod subnet's first
// address), pinged from the node's own network namespace.
type OverlayPeer struct {
	Node, Address string
}

// Overlay checks that every peer answered a ping through the overlay
// (answered, by address: Host.Overlay), small packets and those as large
// as the node's VXLAN device's mtu takes: what pod-to-pod traffic between
// the nodes goes through, without a pod.
func Overlay(peers []OverlayPeer, answered map[string]string, mtu int) Result {
	if len(peers) == 0 {
		return Skipped("no other node with a pod subnet")
	}
	silent, small := pinged(peers, answered)
	switch {
	case len(silent) > 0:
		return Failed("every other node to answer through the overlay network",
			"no answer through the overlay from "+strings.Join(silent, ", "),
			"pods on these nodes cannot reach each other: open the overlay's UDP port between the nodes (flannel's VXLAN: 8472) in their firewalls and security groups; check that flannel runs on both nodes. A Node deleted and registered again gets another pod subnet, which its flannel pod learns only when it starts again: delete that pod (rigger apply does, when it brings the Node back)")
	case len(small) > 0:
		return mtuFailed(mtu, small)
	}
	found := fmt.Sprintf("%d nodes answer through the overlay", len(peers))
	if mtu > 0 {
		found += fmt.Sprintf(", with packets of its MTU (%d bytes)", mtu)
	}
	return Passed(found)
}

// CheckPodNetwork is the check of pod-to-pod traffic from a probe pod on
// the node to those on the others.
const CheckPodNetwork = "pod-network"

// PodNetwork checks that the probe pods on the other nodes (peers, at
// their pod addresses) answered pings from the probe pod on this node
// (answered: Host.Overlay), small ones and those of the pod interface's
// mtu: the row of this node in the N×N matrix of pod-to-pod traffic.
func PodNetwork(peers []OverlayPeer, answered map[string]string, mtu int) Result {
	silent, small := pinged(peers, answered)
	switch {
	case len(silent) > 0:
		return Failed("the probe pods on every other node to answer this node's",
			"no answer from the probe pods on "+strings.Join(silent, ", "),
			"where the overlay check passed, the nodes reach each other and their pods do not: look for firewall rules that drop forwarded traffic (iptables -S FORWARD: Docker's default DROP policy, a host firewall), net.ipv4.ip_forward=0 on either node, and network policies; then the network plugin's logs on both nodes")
	case len(small) > 0:
		return mtuFailed(mtu, small)
	}
	return Passed(fmt.Sprintf("the probe pods of the %d other nodes answer, with packets of the pod MTU (%d bytes)", len(peers), mtu))
}

// pinged sorts peers by what answered says of them: those that answered
// nothing and those that answered small packets only.
func pinged(peers []OverlayPeer, answered map[string]string) (silent, small []string) {
	for _, p := range peers {
		name := fmt.Sprintf("%s (%s)", p.Address, p.Node)
		switch answered[p.Address] {
		case "ok":
		case "small":
			small = append(small, name)
		default:
			silent = append(silent, name)
		}
	}
	return silent, small
}

// mtuFailed is the failure of packets of mtu bytes that did not reach
// peers which answered small ones.
func mtuFailed(mtu int, peers []string) Result {
	return Failed(fmt.Sprintf("packets of the overlay's MTU (%d bytes) to pass to every other node", mtu),
		fmt.Sprintf("small pings answered, pings of %d bytes not: %s", mtu, strings.Join(peers, ", ")),
		fmt.Sprintf("the path between the nodes does not carry the overlay's packets: %d bytes plus VXLAN's 50 (connections hang once they send more than a few packets: TLS handshakes, image pulls, kubectl logs). Allow %d-byte packets and UDP fragments between the nodes, or give the nodes' interfaces the path's MTU so that flannel, which takes its MTU from the interface, sends smaller ones", mtu, mtu+50))
}

// CheckDNS is the check of the cluster DNS, asked from the node.
const CheckDNS = "dns"

// DNSService is what the API server says of the cluster DNS Service.
type DNSService struct {
	// Name is the Service's namespace/name; "" when no Service has the
	// cluster DNS address.
	Name string
	// Ready counts its ready endpoints.
	Ready int
}

// DNS checks that the cluster DNS Service at server answered a query for
// name from the node (out: what nslookup said): through the Service's
// address, kube-proxy's rules on the node and the overlay to a DNS pod,
// what every pod's lookups take. svc, when the Services were read, tells
// a Service without a ready DNS pod (scaled down, pending, or on a Node
// that was deleted) from a node that cannot reach them.
func DNS(server, name, out string, svc *DNSService) Result {
	answered := false
	named := false
	for _, line := range strings.Split(out, "\n") {
		switch f := strings.Fields(line); {
		case len(f) >= 2 && f[0] == "Name:" && strings.TrimSuffix(f[1], ".") == name:
			named = true
		case named && len(f) >= 2 && strings.HasPrefix(f[0], "Address"):
			answered = true
		}
	}
	if answered {
		return Passed(name + " resolved by " + server)
	}
	found := strings.TrimSpace(out)
	if found == "" {
		found = "no answer"
	}
	expected := name + " resolved by the cluster DNS at " + server
	asked := "nslookup " + name + " " + server + ": " + lastLines(found, 4)
	switch {
	case svc != nil && svc.Name == "":
		return Failed(expected, "no Service has the address "+server+" (services.kubelet.cluster_dns_server); "+asked,
			"the DNS add-on's Service is missing or has another address: rigger apply deploys it with cluster_dns_server's address (kubectl -n kube-system get svc -o wide)")
	case svc != nil && svc.Ready == 0:
		return Failed(expected, "the Service "+svc.Name+" has no ready endpoint: no DNS pod is ready; "+asked,
			"kubectl -n kube-system get pods -l k8s-app=kube-dns -o wide says why: scaled to 0 (rigger apply restores the add-on's replicas), pending (no node they may run on), not ready (their logs), or on a Node that was deleted (they come back once it registers again)")
	}
	return Failed(expected, asked,
		"check the DNS pods (kubectl -n kube-system get pods -l k8s-app=kube-dns -o wide) and their logs, that kube-proxy runs on this node (its Service rules lead to them), and the overlay between this node and theirs (the overlay check)")
}

// CheckEtcdDisk is the check of how fast an etcd member's disk syncs.
const CheckEtcdDisk = "etcd-disk"

// etcd's own guidance for its disk: the 99th percentile of its WAL's
// fsyncs under 10 ms, of its backend's commits under 25 ms. Slower, a
// member misses heartbeats ("failed to send out heartbeat on time",
// "apply request took too long") and leaders change.
const (
	maxWALFsync      = 10 * time.Millisecond
	maxBackendCommit = 25 * time.Millisecond
	// minDiskSamples: fewer syncs than this since the member started say
	// nothing yet.
	minDiskSamples = 100
)

// EtcdDisk judges an etcd member's disk from its metrics (the Prometheus
// text of its /metrics): the 99th percentile of its WAL fsyncs and
// backend commits since it started, from their histograms.
func EtcdDisk(metrics []byte) Result {
	wal, walN := percentile(metrics, "etcd_disk_wal_fsync_duration_seconds_bucket", 0.99)
	commit, commitN := percentile(metrics, "etcd_disk_backend_commit_duration_seconds_bucket", 0.99)
	if walN < minDiskSamples {
		return Passed(fmt.Sprintf("%d WAL fsyncs since etcd started: too few to judge", walN))
	}
	found := fmt.Sprintf("99th percentile since etcd started: WAL fsync ≤ %s (%d), backend commit ≤ %s (%d)", wal, walN, commit, commitN)
	if wal > maxWALFsync || commitN >= minDiskSamples && commit > maxBackendCommit {
		return Warned(fmt.Sprintf("WAL fsyncs under %s and backend commits under %s (99th percentile)", maxWALFsync, maxBackendCommit), found,
			"etcd's disk is too slow for it (\"failed to send out heartbeat on time\", \"apply request took too long\", leader changes): give /var/lib/etcd an SSD of its own, not shared with Docker's images or logs, or a faster volume class; avoid network disks with burst credits")
	}
	return Passed(found)
}

// percentile is the upper bound of the bucket where the q-quantile of the
// Prometheus histogram name (its _bucket series, summed over labels other
// than le) falls, and the number of samples; +Inf bounds are returned as
// the largest finite bound.
func percentile(metrics []byte, name string, q float64) (time.Duration, uint64) {
	counts := map[float64]float64{}
	for _, line := range strings.Split(string(metrics), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		i := strings.Index(line, `le="`)
		j := strings.LastIndexByte(line, ' ')
		if i < 0 || j < i {
			continue
		}
		le := line[i+4:]
		le = le[:strings.IndexByte(le, '"')]
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(line[j+1:]), 64)
		if err != nil {
			continue
		}
		counts[bound] += n
	}
	bounds := slices.Sorted(maps.Keys(counts))
	if len(bounds) == 0 {
		return 0, 0
	}
	total := counts[bounds[len(bounds)-1]]
	var at float64
	for _, b := range bounds {
		if !math.IsInf(b, 1) {
			at = b
		}
		if counts[b] >= q*total {
			break
		}
	}
	return time.Duration(at * float64(time.Second)), uint64(total)
}
