package reconcile

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/internal/clip"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
)

// Status is what rigger sees of a cluster: its nodes, their containers,
// their Kubernetes Nodes and the certificates. It holds no secret.
type Status struct {
	Cluster    string       `json:"cluster"`
	ObservedAt time.Time    `json:"observed_at"`
	Nodes      []NodeStatus `json:"nodes"`
	// PendingSteps is how many steps a plan has now (zero: in sync).
	PendingSteps int `json:"pending_steps"`
	// Certificates are when the cluster's certificates expire, by name.
	Certificates map[string]time.Time `json:"certificates,omitempty"`
	// KubernetesNodes are the Nodes as the API server lists them, those
	// that no node of cluster.yml owns included.
	KubernetesNodes []KubernetesNode `json:"kubernetes_nodes,omitempty"`
	// KubernetesError says why the Nodes could not be listed.
	KubernetesError string `json:"kubernetes_error,omitempty"`
	// StaleNodes are Nodes that no node of cluster.yml owns (no address
	// label and no node of their name, an address not in cluster.yml, or
	// the loser of a duplicate); rigger.stale_nodes: delete deletes them.
	StaleNodes []observe.Stale `json:"stale_nodes,omitempty"`
	// DuplicateNodes are addresses that more than one Node claims.
	DuplicateNodes []observe.Duplicate `json:"duplicate_nodes,omitempty"`
	// MissingNodes are the nodes of cluster.yml without a Node, by address.
	MissingNodes []string `json:"missing_nodes,omitempty"`
	// NodeChanges are what an apply would change on the Nodes besides the
	// steps: labels, taints, stale Nodes (Planned.NodeChanges).
	NodeChanges []kubenode.Pending `json:"node_changes,omitempty"`
	// Etcd is the etcd cluster's membership and each member's health; nil
	// when no node runs etcd (an external etcd).
	Etcd *EtcdStatus `json:"etcd,omitempty"`
	// Addons are the add-ons cluster.yml asks for and those still in the
	// cluster, with their readiness and the changes an apply would make;
	// nil when the API server could not be asked, or AddonsError says why
	// they could not be read.
	Addons      []AddonStatus `json:"addons,omitempty"`
	AddonsError string        `json:"addons_error,omitempty"`
	// SecretsEncryption is the key rigger generated for Secrets at rest,
	// by name only; nil when cluster.yml asks for none.
	SecretsEncryption *EncryptionStatus `json:"secrets_encryption,omitempty"`
	// CertificateRotation is the certificate rotation an apply carries out
	// (Resumed: under way, an earlier apply started it); nil when none.
	CertificateRotation *Rotation `json:"certificate_rotation,omitempty"`
}

// EncryptionStatus is the generated secrets encryption key: the keys'
// names (never their secrets), the operation in progress, the last
// rotation.
type EncryptionStatus struct {
	// Keys are the names of the keys the API servers get, the first one
	// encrypting.
	Keys []string `json:"keys"`
	// Operation and Stage are the operation in progress (rotate,
	// encrypt) and its stage.
	Operation string `json:"operation,omitempty"`
	Stage     string `json:"stage,omitempty"`
	// LastRotated is when the last rotation ended, to LastRotatedKey.
	LastRotated    time.Time `json:"last_rotated,omitzero"`
	LastRotatedKey string    `json:"last_rotated_key,omitempty"`
}

// encryptionStatus is the status of the plan's generated key.
func encryptionStatus(e *Encryption) *EncryptionStatus {
	if e == nil {
		return nil
	}
	st := &EncryptionStatus{Keys: e.Keys, LastRotated: e.LastRotated, LastRotatedKey: e.LastRotatedKey}
	if e.Op != nil {
		st.Operation, st.Stage = string(e.Op.Kind), string(e.Op.Stage)
	}
	return st
}

// AddonStatus is one add-on.
type AddonStatus struct {
	Name string `json:"name"`
	// Objects is how many objects it has in the cluster (its inventory).
	Objects int `json:"objects"`
	// Ready is set when every object it has in the cluster is ready.
	Ready bool `json:"ready"`
	// NotReady are the objects that are not, with why (a few).
	NotReady []string `json:"not_ready,omitempty"`
	// Pending is how many of its objects an apply would create, change or
	// prune; Removed is set when cluster.yml no longer has it.
	Pending int  `json:"pending,omitempty"`
	Removed bool `json:"removed,omitempty"`
	// Error says why it could not be read.
	Error string `json:"error,omitempty"`
}

// EtcdStatus is what the etcd members say.
type EtcdStatus struct {
	// Members as a member lists them, with their health.
	Members []etcdmember.Member `json:"members,omitempty"`
	// Health of the member on each etcd node of cluster.yml, by address:
	// "healthy" or why not.
	Health map[string]string `json:"health"`
	// Error says why the members could not be listed.
	Error string `json:"error,omitempty"`
}

// NodeStatus is one node of cluster.yml, or one that left it and still
// runs the cluster's containers.
type NodeStatus struct {
	Address  string   `json:"address"`
	Hostname string   `json:"hostname,omitempty"`
	Roles    []string `json:"roles,omitempty"`
	// Removed is set for a node that is not in cluster.yml any more.
	Removed    bool              `json:"removed,omitempty"`
	Reachable  bool              `json:"reachable"`
	Error      string            `json:"error,omitempty"`
	Containers []ContainerStatus `json:"containers,omitempty"`
	// CertsExpire is when the first certificate in the node's
	// /etc/kubernetes expires, as read from the node; nil when none was read.
	CertsExpire *time.Time `json:"certs_expire,omitempty"`
	// KubernetesNode is the node's Node object; nil when there is none.
	KubernetesNode *KubernetesNode `json:"kubernetes_node,omitempty"`
}

// ContainerStatus is one component container of a node.
type ContainerStatus struct {
	Name   string `json:"name"`
	Image  string `json:"image"`
	State  string `json:"state"`
	Health string `json:"health,omitempty"`
	// InSync is set when the plan has no step for the container.
	InSync bool `json:"in_sync"`
}

// KubernetesNode is what the API server says of a node.
type KubernetesNode struct {
	Name string `json:"name"`
	// InternalIP is the address the kubelet reported.
	InternalIP string `json:"internal_ip,omitempty"`
	// Ready is the Ready condition's status: True, False or Unknown, and
	// ReadyReason and ReadyMessage what the kubelet (or the node lifecycle
	// controller) said when it is not True.
	Ready          string `json:"ready"`
	ReadyReason    string `json:"ready_reason,omitempty"`
	ReadyMessage   string `json:"ready_message,omitempty"`
	KubeletVersion string `json:"kubelet_version,omitempty"`
}

// maxReadyMessage bounds a Node's Ready message in the status.
const maxReadyMessage = 300

// Status observes the cluster (a plan: the nodes, etcd and the Kubernetes
// Nodes) and says what it saw. A failure to reach the API server is part
// of the status, not an error.
func (s *Session) Status(ctx context.Context) (*Status, *Planned, error) {
	pl, err := s.Plan(ctx)
	if err != nil {
		return nil, nil, err
	}
	return BuildStatus(pl), pl, nil
}

// etcdStatus is what the plan's observation says of etcd: the members a
// member listed, and for each etcd node of cluster.yml whether its member
// answered. It probes nothing itself.
func etcdStatus(pl *Planned) *EtcdStatus {
	es := &EtcdStatus{Health: map[string]string{}}
	for _, n := range pl.Desired.Nodes {
		if _, ok := n.Container(desired.Etcd); !ok {
			continue
		}
		switch on := pl.Observed.Nodes[n.Address]; {
		case on == nil || !on.Reachable:
			es.Health[n.Address] = "node not reachable"
		case pl.Observed.Etcd == nil:
			es.Health[n.Address] = "no etcd member answered"
		default:
			m := etcdmember.Find(pl.Observed.Etcd.Members, desired.EtcdPeerURL(n.InternalAddress))
			switch {
			case m == nil:
				es.Health[n.Address] = "not a member"
			case m.Healthy:
				es.Health[n.Address] = "healthy"
			default:
				es.Health[n.Address] = m.Error
			}
		}
	}
	if len(es.Health) == 0 {
		return nil
	}
	if pl.Observed.Etcd != nil {
		es.Members = pl.Observed.Etcd.Members
	} else {
		es.Error = "no etcd member answered"
	}
	return es
}

// BuildStatus puts a plan and what it was computed from together: the
// nodes, their containers, the Kubernetes Nodes (each machine's found by
// its address label, observe.Link), etcd and the certificates.
func BuildStatus(pl *Planned) *Status {
	st := &Status{
		Cluster: pl.Desired.Name, ObservedAt: pl.Observed.At, PendingSteps: len(pl.Plan.Steps),
		Certificates: pki.Expiry(pl.PKI), Etcd: etcdStatus(pl), NodeChanges: pl.NodeChanges, Addons: addonStatus(pl),
		SecretsEncryption: encryptionStatus(pl.Encryption), CertificateRotation: pl.Rotation(),
	}
	if pl.AddonsErr != nil {
		st.AddonsError = pl.AddonsErr.Error()
	}
	k := pl.Observed.Kubernetes
	if k == nil {
		k = &observe.Kubernetes{}
	}
	if k.Err != nil {
		st.KubernetesError = k.Err.Error()
	}
	if l := k.Link; l != nil {
		st.StaleNodes, st.DuplicateNodes, st.MissingNodes = l.Stale, l.Duplicates, l.Missing
	}
	pending := map[string]bool{}
	for _, s := range pl.Plan.Steps {
		pending[s.Node+"/"+s.Component] = true
	}
	byName := map[string]*KubernetesNode{}
	for _, n := range k.Nodes {
		kn := KubernetesNode{Name: n.Name, Ready: string(corev1.ConditionUnknown), KubeletVersion: n.Status.NodeInfo.KubeletVersion}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				kn.Ready = string(c.Status)
				if c.Status != corev1.ConditionTrue {
					kn.ReadyReason, kn.ReadyMessage = c.Reason, clip.Ellipsis(c.Message, maxReadyMessage)
				}
			}
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				kn.InternalIP = a.Address
			}
		}
		st.KubernetesNodes = append(st.KubernetesNodes, kn)
	}
	slices.SortFunc(st.KubernetesNodes, func(a, b KubernetesNode) int { return strings.Compare(a.Name, b.Name) })
	for i := range st.KubernetesNodes {
		byName[st.KubernetesNodes[i].Name] = &st.KubernetesNodes[i]
	}
	add := func(addr, hostname string, roles []string, removed bool) {
		ns := NodeStatus{Address: addr, Hostname: hostname, Roles: roles, Removed: removed}
		on := pl.Observed.Nodes[addr]
		if on != nil {
			ns.Reachable, ns.Error = on.Reachable, on.Error
			for _, t := range on.CertExpiry {
				if ns.CertsExpire == nil || t.Before(*ns.CertsExpire) {
					ns.CertsExpire = &t
				}
			}
			for _, name := range sortedContainerNames(on) {
				c := on.Containers[name]
				ns.Containers = append(ns.Containers, ContainerStatus{Name: name, Image: c.Image, State: c.State,
					Health: c.Health, InSync: !pending[addr+"/"+name]})
			}
		}
		if k.Link != nil && !removed {
			if n := k.Link.Owned[addr]; n != nil {
				ns.KubernetesNode = byName[n.Name]
			}
		}
		st.Nodes = append(st.Nodes, ns)
	}
	for _, n := range pl.Desired.Nodes {
		add(n.Address, n.Hostname, n.Roles, false)
	}
	var removed []string
	for addr := range pl.Observed.Nodes {
		if _, ok := pl.Desired.Node(addr); !ok {
			removed = append(removed, addr)
		}
	}
	slices.Sort(removed)
	for _, addr := range removed {
		add(addr, "", nil, true)
	}
	return st
}

func sortedContainerNames(n *observe.Node) []string {
	names := make([]string, 0, len(n.Containers))
	for name := range n.Containers {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return plan.Rank(a) - plan.Rank(b) })
	return names
}

// addonStatus puts together the add-ons' health and their pending changes,
// in the order of the plan's add-ons, then those only in the cluster.
func addonStatus(pl *Planned) []AddonStatus {
	if pl.Addons == nil {
		return nil
	}
	health := map[string]addons.Health{}
	for _, h := range pl.AddonHealth {
		health[h.Name] = h
	}
	var out []AddonStatus
	seen := map[string]bool{}
	for _, ac := range pl.Addons.Addons {
		seen[ac.Name] = true
		h, ok := health[ac.Name]
		as := AddonStatus{Name: ac.Name, Removed: ac.Removed, Pending: len(ac.Changes) - ac.Count(addons.Unchanged),
			Objects: h.Objects, Ready: ok && h.Ready(), NotReady: h.NotReady, Error: h.Error}
		out = append(out, as)
	}
	for _, h := range pl.AddonHealth {
		if !seen[h.Name] {
			out = append(out, AddonStatus{Name: h.Name, Objects: h.Objects, Ready: h.Ready(), NotReady: h.NotReady, Error: h.Error})
		}
	}
	return out
}
