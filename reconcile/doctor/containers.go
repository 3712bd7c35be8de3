package doctor

import (
	"fmt"
	"strings"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/observe"
)

// The checks of what runs on a node.
const (
	CheckImages     = "images"
	CheckContainers = "containers"
	CheckEtcdMember = "etcd-member"
	CheckHealth     = "health"
)

// RecentRestart is how long after a restart a running container is still
// worth a warning.
const RecentRestart = 10 * time.Minute

// Container is a container of a node as doctor reads it: as observed,
// with its restart count and last start (an inspection), and its last log
// lines when it does not run.
type Container struct {
	observe.Container
	StartedAt time.Time
	Logs      string
}

// Containers checks the containers rigger runs on a node (want) against
// those found there (got, by name): each present, running and not
// restarting over and over, and created from cluster.yml's spec (a
// container that differs only warns: it runs, and rigger apply replaces
// it). Containers that run once (service-sidekick) are not checked.
func Containers(want []desired.Container, got map[string]Container, now time.Time) Result {
	var rs []Result
	for i := range want {
		dc := &want[i]
		if dc.RunOnce {
			continue
		}
		c, ok := got[dc.Name]
		switch {
		case !ok:
			rs = append(rs, Failed(dc.Name+" running", dc.Name+" not created", "rigger apply -f cluster.yml creates it"))
		case c.State == "restarting":
			rs = append(rs, Failed(dc.Name+" running", dc.Name+" restarting (a crash loop)"+exitText(c)+logsText(c),
				"its last log lines above say why it exits; fix that, then rigger apply replaces it (docker logs "+dc.Name+" on the node)"))
		case c.State != "running":
			rs = append(rs, Failed(dc.Name+" running", dc.Name+" "+c.State+exitText(c)+logsText(c),
				"rigger apply starts it again; if it exits again, its log lines say why (docker logs "+dc.Name+" on the node)"))
		case c.RKE:
			rs = append(rs, Warned(dc.Name+" rigger's", dc.Name+" is RKE's", "rigger apply takes it over (rigger adopt first: docs/migrating-from-rke.md)"))
		case c.SpecHash != dc.Hash():
			rs = append(rs, Warned(dc.Name+" as cluster.yml says", dc.Name+" differs from cluster.yml", "rigger plan shows how; rigger apply replaces it"))
		case c.RestartCount > 0 && !c.StartedAt.IsZero() && now.Sub(c.StartedAt) < RecentRestart:
			rs = append(rs, Warned(dc.Name+" running without restarts",
				fmt.Sprintf("%s restarted %s, the last time %s ago", dc.Name, dockerop.Times(c.RestartCount), now.Sub(c.StartedAt).Round(time.Second)),
				"docker logs "+dc.Name+" on the node says why it exited"))
		default:
			rs = append(rs, Passed(dc.Name))
		}
	}
	r := Worst(rs...)
	if r.Level == Pass {
		r.Found = fmt.Sprintf("%d containers running as cluster.yml says", len(rs))
	}
	return r
}

func exitText(c Container) string {
	var parts []string
	if c.ExitCode != nil {
		parts = append(parts, fmt.Sprintf("exit code %d", *c.ExitCode))
	}
	if c.RestartCount > 0 {
		parts = append(parts, "restarted "+dockerop.Times(c.RestartCount))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// logLines is how many of a container's last log lines a finding shows.
const logLines = 8

func logsText(c Container) string {
	if c.Logs == "" {
		return ""
	}
	return "; last lines:\n" + lastLines(c.Logs, logLines)
}

// lastLines are the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Images checks that every image of the node's containers is on the
// node; missing ones are pullable (a warning: the apply pulls them) or
// not (pullErr by image: what the registry said).
func Images(missing []string, pullErr map[string]error) Result {
	if len(missing) == 0 {
		return Passed("every image on the node")
	}
	var rs []Result
	for _, img := range missing {
		if err := pullErr[img]; err != nil {
			rs = append(rs, Failed(img+" on the node or pullable", fmt.Sprintf("%s missing, and the registry says: %v", img, err),
				"check the image name (system_images), the registry's address and private_registries' credentials in cluster.yml, and that the node reaches the registry (pull access denied, manifest unknown)"))
			continue
		}
		rs = append(rs, Warned(img+" on the node", img+" missing (pullable)", "rigger apply pulls it"))
	}
	return Worst(rs...)
}

// CheckPorts is the check of a node's ports, probed from the nodes that
// need them.
const CheckPorts = "ports"

// PortProbe is one connection to a port of a node, dialled from another
// node (From) as the components there dial it.
type PortProbe struct {
	Port int
	// What serves the port ("etcd peer", "kube-apiserver", …).
	What string
	From string
	// Err is the dial's error; nil when it connected.
	Err error
}

// Ports checks the probes of a node's ports: each must connect. A refused
// connection means nothing listens there (or a firewall rejects it); one
// without an answer, a firewall that drops it.
func Ports(probes []PortProbe) Result {
	if len(probes) == 0 {
		return Skipped("no other node needs this node's ports")
	}
	var failed []string
	ports := map[int]bool{}
	for _, p := range probes {
		ports[p.Port] = true
		if p.Err != nil {
			failed = append(failed, fmt.Sprintf("%d (%s) from %s: %v", p.Port, p.What, p.From, p.Err))
		}
	}
	if len(failed) == 0 {
		return Passed(fmt.Sprintf("%d ports reached from the nodes that need them", len(ports)))
	}
	return Failed("its ports reachable from the nodes that need them", strings.Join(failed, "; "),
		"open the ports in the node's firewall (iptables, firewalld, a cloud security group) for the other nodes: etcd 2379-2380 between etcd and controlplane nodes, 6443 from every node, 10250 from the controlplane; the overlay's UDP port (flannel: 8472) between all nodes")
}
