// Package report is what rigger tells of a cluster: its status (Status,
// rigger status and status.yml) and a plan as rigger plan -o json writes it
// (PlanReport), built from a plan and what it was computed from (Input).
// They hold no secret.
package report

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/internal/clip"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/spec/rkemeta"
)

// Input is a plan and what it was computed from, as package decide's
// Planned holds them.
type Input struct {
	Plan     *plan.Plan
	Desired  *desired.Cluster
	Observed *observe.Cluster
	// PKI, PKIChanges and PKISource are the plan's certificates, those it
	// issues and where they come from.
	PKI        *pki.Set
	PKIChanges []pki.Change
	PKISource  pkisource.Source
	// Rotation is the certificate rotation the plan carries out,
	// RotationWaiting one that waits for it, RotationRecordCleared whether
	// the record of cluster.yml's request is dropped.
	Rotation              *Rotation
	RotationWaiting       *pki.Rotation
	RotationRecordCleared bool
	Encryption            *Encryption
	NodeChanges           []kubenode.Pending
	Addons                *addons.ChangeSet
	AddonHealth           []addons.Health
	AddonsErr             error
	Warnings              []string
	// Changes, Complete and Blocked are the plan's (Planned.Changes, …).
	Changes, Complete bool
	Blocked           error
	// BlockedPhases are the rolling phases the plan's budgets stop before
	// they change anything (plan.Budgets.Blocked).
	BlockedPhases map[plan.Phase]error
}

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
	// Kubernetes are the versions the Kubernetes components run; nil when
	// no node that answered runs one.
	Kubernetes *KubernetesVersions `json:"kubernetes,omitempty"`
	// Problems are the warnings and failures of rigger doctor's checks
	// that the observation answers, each with its fix (set by package
	// reconcile: Planned.Problems).
	Problems []doctor.Finding `json:"problems,omitempty"`
}

// KubernetesVersions are the versions the Kubernetes components of the
// nodes that answered run (their images' tags), and the upgrade an apply
// carries out.
type KubernetesVersions struct {
	// Running are the versions, oldest first, each with the nodes where a
	// component runs it.
	Running []VersionNodes `json:"running"`
	// Mixed is set when more than one version runs: an upgrade under way,
	// or one that stopped midway (a node that did not answer, a failed
	// step); the next apply goes on with it.
	Mixed bool `json:"mixed,omitempty"`
	// Upgrade is the Kubernetes minor upgrade an apply carries out now.
	Upgrade *plan.Upgrade `json:"upgrade,omitempty"`
}

// VersionNodes is a version and the nodes that run it, by address.
type VersionNodes struct {
	Version string   `json:"version"`
	Nodes   []string `json:"nodes"`
}

// kubernetesVersions reads the versions off the observed containers.
func kubernetesVersions(pl Input) *KubernetesVersions {
	nodes := map[string][]string{}
	for addr, n := range pl.Observed.Nodes {
		if n == nil || !n.Reachable {
			continue
		}
		for _, name := range []string{desired.KubeAPIServer, desired.KubeControllerManager, desired.KubeScheduler, desired.Kubelet, desired.KubeProxy} {
			c, ok := n.Containers[name]
			if !ok {
				continue
			}
			v := rkemeta.ImageTag(c.Image)
			if v == "" {
				v = c.Image
			}
			if !slices.Contains(nodes[v], addr) {
				nodes[v] = append(nodes[v], addr)
			}
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	kv := &KubernetesVersions{Mixed: len(nodes) > 1, Upgrade: pl.Plan.Upgrade}
	for v, addrs := range nodes {
		slices.Sort(addrs)
		kv.Running = append(kv.Running, VersionNodes{Version: v, Nodes: addrs})
	}
	slices.SortFunc(kv.Running, func(a, b VersionNodes) int {
		va, erra := rkemeta.ParseVersion(a.Version)
		vb, errb := rkemeta.ParseVersion(b.Version)
		if erra == nil && errb == nil {
			return va.Compare(vb)
		}
		return strings.Compare(a.Version, b.Version)
	})
	return kv
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
	// StartedSince is set when it started again since the last apply,
	// not by rigger, and Restarts is how often Docker restarted it since
	// rigger started it (plan.Plan.Restarted).
	StartedSince bool `json:"started_since_last_apply,omitempty"`
	Restarts     int  `json:"restarts,omitempty"`
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

// etcdStatus is what the plan's observation says of etcd: the members a
// member listed, and for each etcd node of cluster.yml whether its member
// answered. It probes nothing itself.
func etcdStatus(pl Input) *EtcdStatus {
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
func BuildStatus(pl Input) *Status {
	st := &Status{
		Cluster: pl.Desired.Name, ObservedAt: pl.Observed.At, PendingSteps: len(pl.Plan.Steps),
		Certificates: pki.Expiry(pl.PKI), Etcd: etcdStatus(pl), NodeChanges: pl.NodeChanges, Addons: addonStatus(pl),
		SecretsEncryption: encryptionStatus(pl.Encryption), CertificateRotation: pl.Rotation,
		Kubernetes: kubernetesVersions(pl),
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
					Health: c.Health, InSync: !pending[addr+"/"+name], StartedSince: c.StartedSince, Restarts: c.RestartCount})
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
func addonStatus(pl Input) []AddonStatus {
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

// PlanReport is a plan as `rigger plan -o json` and `--out` write it:
// the steps on the nodes (plan.Plan's fields, which `apply --plan` reads
// back), and everything else the text plan shows that an apply changes.
// It holds no secret.
type PlanReport struct {
	*plan.Plan
	// Changes and Complete are Planned.Changes and Planned.Complete, which
	// rigger plan's exit codes 2 and 1 say.
	Changes  bool `json:"changes"`
	Complete bool `json:"complete"`
	// Blocked says why the plan must not be applied (Planned.Blocked).
	Blocked string `json:"blocked,omitempty"`
	// BlockedPhases are the rolling phases an apply stops before they
	// change anything, each with why: upgrade_strategy's budget used up by
	// nodes already down.
	BlockedPhases map[plan.Phase]string `json:"blocked_phases,omitempty"`
	// Certificates are where the PKI comes from and what is issued.
	Certificates CertificatesReport `json:"certificates"`
	// CertificateRotation is the rotation an apply carries out;
	// CertificateRotationWaiting one that waits for it to be done;
	// CertificateRotationRecordDropped says that cluster.yml no longer
	// asks for the recorded one (Planned.RotationRecordCleared).
	CertificateRotation              *Rotation     `json:"certificate_rotation,omitempty"`
	CertificateRotationWaiting       *pki.Rotation `json:"certificate_rotation_waiting,omitempty"`
	CertificateRotationRecordDropped bool          `json:"certificate_rotation_record_dropped,omitempty"`
	// SecretsEncryption is the generated key (by name) and the stages an
	// apply runs; nil when cluster.yml asks for none.
	SecretsEncryption *EncryptionReport `json:"secrets_encryption,omitempty"`
	Warnings          []string          `json:"warnings,omitempty"`
	// NodeChanges are the labels, taints and stale Nodes an apply changes.
	NodeChanges []kubenode.Pending `json:"node_changes,omitempty"`
	// Addons are what applying the add-ons changes; nil when they could
	// not be planned (AddonsError says why, when the API server answered).
	Addons      *addons.ChangeSet `json:"addons,omitempty"`
	AddonsError string            `json:"addons_error,omitempty"`
}

// CertificatesReport is where a plan's PKI comes from and the
// certificates it issues.
type CertificatesReport struct {
	pkisource.Source
	Issue []pki.Change `json:"issue,omitempty"`
}

// EncryptionReport is the generated secrets encryption key of a plan.
type EncryptionReport struct {
	EncryptionStatus
	pkisource.Source
	// Stages are the stages an apply runs, the operation's own first.
	Stages []string `json:"stages,omitempty"`
}

// Plan is the plan as PlanReport.
func Plan(p Input) *PlanReport {
	r := &PlanReport{
		Plan: p.Plan, Changes: p.Changes, Complete: p.Complete,
		Certificates:                     CertificatesReport{Source: p.PKISource, Issue: p.PKIChanges},
		CertificateRotation:              p.Rotation,
		CertificateRotationWaiting:       p.RotationWaiting,
		CertificateRotationRecordDropped: p.RotationRecordCleared,
		Warnings:                         p.Warnings, NodeChanges: p.NodeChanges, Addons: p.Addons,
	}
	if p.Blocked != nil {
		r.Blocked = p.Blocked.Error()
	}
	for ph, err := range p.BlockedPhases {
		if r.BlockedPhases == nil {
			r.BlockedPhases = map[plan.Phase]string{}
		}
		r.BlockedPhases[ph] = err.Error()
	}
	if e := p.Encryption; e != nil {
		r.SecretsEncryption = &EncryptionReport{EncryptionStatus: *encryptionStatus(e), Source: e.Source}
		for _, st := range e.Stages {
			r.SecretsEncryption.Stages = append(r.SecretsEncryption.Stages, string(st))
		}
	}
	if p.AddonsErr != nil {
		r.AddonsError = p.AddonsErr.Error()
	}
	return r
}

// Encryption is what a plan knows of the Secrets encryption key rigger
// generates (secrets_encryption_config.enabled without custom_config):
// where it comes from, the keys' names (never their secrets), and the stage
// of the operation on it that the plan carries out (secretsenc.Decide).
type Encryption struct {
	// Source is where the key comes from: the state directory, a node
	// (recovered), or new (pkisource.New: no controlplane node has one yet).
	Source pkisource.Source
	// Keys are the names of the keys the API servers get, the first one
	// encrypting.
	Keys []string
	// Op is the operation in progress (or started by this apply), with the
	// stage it is at; nil when none.
	Op *secretsenc.Op
	// Stages are the stages of Op still to run, Op's own first.
	Stages []secretsenc.Stage
	// LastRotated and LastRotatedKey are the end of the last rotation
	// and the key it brought.
	LastRotated    time.Time
	LastRotatedKey string
}

// EncryptionOf is what people are shown of p, whose state directory is
// stateDir; nil when p is.
func EncryptionOf(p *secretsenc.Plan, stateDir string) *Encryption {
	if p == nil {
		return nil
	}
	e := &Encryption{Source: pkisource.Source{Kind: pkisource.Kind(p.Source), From: p.From}, Keys: p.Want.Names(),
		Op: p.Record.Op, Stages: p.Stages(), LastRotated: p.Record.LastRotated, LastRotatedKey: p.Record.LastRotatedKey}
	if p.Source == secretsenc.SourceState {
		e.Source.From = stateDir
	}
	return e
}

// Rotation is the certificate rotation a plan carries out (cluster.yml's
// rotate_certificates, or rigger cert rotate), for people.
type Rotation struct {
	pki.Rotation
	// From says who asked: certrotate.FromClusterYML or FromCommandLine.
	From string `json:"from"`
	// Resumed is set when an earlier apply started the rotation and did not
	// finish it: its certificates are not issued again.
	Resumed bool `json:"resumed,omitempty"`
	// Stage is the stage of a CA rotation the plan moves the nodes to.
	Stage pki.CAStage `json:"stage,omitempty"`
	// Names are the certificates rotated; every component that reads one
	// restarts, node by node.
	Names []string `json:"certificates"`
}
