package spec

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

var roles = []string{RoleEtcd, RoleControlPlane, RoleWorker}

func (v *validator) nodes(c *Cluster) {
	if len(c.Nodes) == 0 {
		v.errorf("nodes", "Add the cluster's machines under nodes:, each with address, user and role.", "no nodes are defined")
		return
	}
	count := map[string]int{}
	addresses := map[string]int{}
	hostnames := map[string]int{}
	for i, n := range c.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		host := i + 1
		if n.Address == "" {
			v.errorf(p+".address", "Give the IP or name rigger reaches the node at.", "Address for host (%d) is not provided", host)
		}
		if n.User == "" && n.Transport == TransportSSH {
			v.errorf(p+".user", "Give the SSH user; it needs access to the Docker socket.", "User for host (%d) is not provided", host)
		}
		if len(n.Role) == 0 {
			v.errorf(p+".role", "Give one or more of: etcd, controlplane, worker.", "Role for host (%d) is not provided", host)
		}
		seen := map[string]bool{}
		for j, r := range n.Role {
			rp := fmt.Sprintf("%s.role[%d]", p, j)
			switch {
			case !slices.Contains(roles, r):
				detail := "Roles are etcd, controlplane and worker."
				if s := suggest(r, roles); s != "" {
					detail = fmt.Sprintf("Did you mean %q? ", s) + detail
				} else if r == "master" || r == "control-plane" {
					detail = `Did you mean "controlplane"? ` + detail
				}
				v.errorf(rp, detail, "Role [%s] for host (%d) is not recognized", r, host)
			case seen[r]:
				v.warnf(rp, "", "role %q is listed twice", r)
			default:
				count[r]++
			}
			seen[r] = true
		}
		if n.HostnameOverride != "" {
			if errs := dns1123SubdomainErrors(n.HostnameOverride); len(errs) > 0 {
				field, detail := p+".hostname_override", ""
				if _, set := v.pos[field]; !set {
					field, detail = p+".address", "The node name defaults to the address; set hostname_override to a valid name."
				}
				v.errorf(field, detail, "Hostname_override [%s] for host (%d) is not valid: %s", n.HostnameOverride, host, strings.Join(errs, "; "))
			}
		}
		if n.Address != "" {
			if j, dup := addresses[n.Address]; dup {
				v.errorf(p+".address", fmt.Sprintf("nodes[%d] has the same address; each machine is listed once.", j), "Cluster can't have duplicate node: %s", n.Address)
			}
			addresses[n.Address] = i
		}
		if n.HostnameOverride != "" {
			if j, dup := hostnames[n.HostnameOverride]; dup && c.Nodes[j].Address != n.Address {
				v.errorf(p+".hostname_override", fmt.Sprintf("nodes[%d] has the same node name; node names must be unique.", j), "Cluster can't have duplicate node: %s", n.HostnameOverride)
			}
			hostnames[n.HostnameOverride] = i
		}
		v.port(p+".port", n.Port)
		v.oneOf(p+".transport", n.Transport, false, TransportSSH, TransportAgent)
		if n.DockerSocket != "" && !validSocketPath(n.DockerSocket) {
			v.errorf(p+".docker_socket", "Give the absolute path of the node's Docker socket, e.g. /var/run/docker.sock: "+
				"letters, digits and / . _ - + @ only (it goes into the agent's docker run line).",
				"docker_socket %q is not an absolute path of a socket", n.DockerSocket)
		}
		if n.SSHKey != "" {
			if _, set := v.pos[p+".ssh_key_path"]; set {
				v.warnf(p+".ssh_key_path", "", "ssh_key and ssh_key_path are both set: ssh_key is used")
			}
		}
		if n.InternalAddress != "" && net.ParseIP(n.InternalAddress) == nil && len(dns1123SubdomainErrors(strings.ToLower(n.InternalAddress))) > 0 {
			v.errorf(p+".internal_address", "Give an IP address or a resolvable name.", "internal_address %q is neither an IP address nor a host name", n.InternalAddress)
		}
		v.labels(p+".labels", n.Labels)
		for j, t := range n.Taints {
			tp := fmt.Sprintf("%s.taints[%d]", p, j)
			if errs := qualifiedNameErrors(t.Key); len(errs) > 0 {
				v.errorf(tp+".key", "Taint keys are label-style names, e.g. dedicated or example.com/gpu.", "taint key %q is not valid: %s", t.Key, strings.Join(errs, "; "))
			}
			if errs := labelValueErrors(t.Value); len(errs) > 0 {
				v.errorf(tp+".value", "", "taint value %q is not valid: %s", t.Value, strings.Join(errs, "; "))
			}
			v.oneOf(tp+".effect", t.Effect, false, "NoSchedule", "PreferNoSchedule", "NoExecute")
		}
	}

	external := len(c.Services.Etcd.ExternalURLs) > 0
	switch {
	case count[RoleEtcd] == 0 && !external:
		v.errorf("nodes", "Give at least one node the etcd role (three for a cluster that survives the loss of one).", "Cluster must have at least one etcd plane host: please specify one or more etcd in cluster config")
	case count[RoleEtcd] > 0 && external:
		v.errorf("services.etcd.external_urls", "Remove the etcd role from the nodes, or remove external_urls.", "Cluster can't have both internal and external etcd")
	case count[RoleEtcd]%2 == 0 && !external:
		v.warnf("nodes", fmt.Sprintf("%d etcd members tolerate no more failures than %d; use an odd number.", count[RoleEtcd], count[RoleEtcd]-1),
			"the cluster has an even number of etcd nodes (%d)", count[RoleEtcd])
	}
	v.etcdCertNames(c)
	if count[RoleControlPlane] == 0 {
		v.errorf("nodes", "Give at least one node the controlplane role.", "Cluster must have at least one control plane host: please specify one or more controlplane in cluster config")
	}
	if count[RoleWorker] == 0 {
		v.warnf("nodes", "Controlplane and etcd nodes are tainted by default; give at least one node the worker role, or remove those taints.", "no node has the worker role")
	}
}

func (v *validator) port(p, port string) {
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.errorf(p, "", "port %q is not a number from 1 to 65535", port)
	}
}

func (v *validator) labels(p string, labels map[string]string) {
	for k, val := range labels {
		lp := mapKeyPath(p, k)
		if errs := qualifiedNameErrors(k); len(errs) > 0 {
			v.errorf(lp, "Label keys are an optional DNS prefix and a name: example.com/tier.", "label key %q is not valid: %s", k, strings.Join(errs, "; "))
		}
		if errs := labelValueErrors(val); len(errs) > 0 {
			v.errorf(lp, "", "label value %q is not valid: %s", val, strings.Join(errs, "; "))
		}
	}
}

// bastion checks bastion_host. As in RKE, one without an address is no
// jump host: `rke config` writes one with every key empty in every file.
func (v *validator) bastion(c *Cluster) {
	b := c.BastionHost
	if b == nil {
		return
	}
	if b.Address == "" {
		if *b != (BastionHost{}) {
			v.warnf("bastion_host", "Give the jump host's address, or remove bastion_host.", "bastion_host has no address: no jump host is used, and its other keys are ignored")
		}
		return
	}
	if b.User == "" {
		v.errorf("bastion_host.user", "", "bastion_host has no user")
	}
	v.port("bastion_host.port", b.Port)
}

// etcdCertNames refuses two etcd nodes whose certificates would have the
// same name: RKE's (and rigger's) kube-etcd-<internal address or address>,
// with '.' and ':' as '-'.
func (v *validator) etcdCertNames(c *Cluster) {
	if len(c.Services.Etcd.ExternalURLs) > 0 {
		return
	}
	seen := map[string]int{}
	for i, n := range c.Nodes {
		if !slices.Contains(n.Role, RoleEtcd) || n.Address == "" {
			continue
		}
		a := n.Address
		if n.InternalAddress != "" && n.InternalAddress != n.Address {
			a = n.InternalAddress
		}
		name := "kube-etcd-" + strings.NewReplacer(".", "-", ":", "-").Replace(strings.ToLower(a))
		if j, dup := seen[name]; dup {
			v.errorf(fmt.Sprintf("nodes[%d].address", i), fmt.Sprintf("nodes[%d] gets the same certificate name: an etcd certificate is named after the internal_address (or address), with '.' and ':' as '-'. Give the nodes addresses that differ after that.", j),
				"the etcd certificate of this node would be named %s, as another node's", name)
			continue
		}
		seen[name] = i
	}
}
