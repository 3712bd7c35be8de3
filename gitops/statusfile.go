package gitops

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/rigger/rigger/internal/clip"
	"github.com/rigger/rigger/reconcile/report"
	"github.com/rigger/rigger/reconcile/stall"
)

// StatusFileName is the file written beside each cluster.yml (or at the
// same path on the status branch).
const StatusFileName = "status.yml"

// statusHeader opens every status.yml.
const statusHeader = "# Written by rigger serve after each reconcile of the cluster.yml beside it.\n" +
	"# Do not edit: rigger overwrites it. It holds no secret.\n"

// StatusFile is the content of status.yml: what rigger last did to a
// cluster and what it saw. It holds no secret: the nodes' status is
// report.Status, which holds none, and errors are rigger's messages,
// which never carry one.
type StatusFile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Cluster    string `json:"cluster"`
	// Source is where the cluster.yml was read.
	Source Source `json:"source"`
	// ObservedRevision is the commit whose cluster.yml was last acted on.
	ObservedRevision string `json:"observedRevision,omitempty"`
	// Replica is the replica of rigger serve that holds the cluster's
	// Lease and wrote this status (serve --leader-elect: several
	// replicas share the clusters).
	Replica string `json:"replica,omitempty"`
	// Suspended is rigger.suspend: the cluster is observed, not changed.
	Suspended bool `json:"suspended,omitempty"`
	// LastReconcile is the last reconcile's trigger, time and result.
	LastReconcile *LastReconcile `json:"lastReconcile,omitempty"`
	// Conditions are Ready, Reconciling and Stalled, as Flux has them.
	Conditions []Condition `json:"conditions"`
	// Drift are the changes the drift checks found and repaired (newest
	// first, at most maxDrift).
	Drift []DriftRepair `json:"drift,omitempty"`
	// Snapshots are the etcd snapshot schedule's last result.
	Snapshots *SnapshotStatus `json:"snapshots,omitempty"`
	// Restore is the last restore request carried out.
	Restore *RestoreStatus `json:"restore,omitempty"`
	// PendingAgents are agents that asked to join and are not in
	// cluster.yml with transport: agent, as "node (host hostname)".
	PendingAgents []string `json:"pendingAgents,omitempty"`
	// AgentTunnels are the tunnels of the nodes with transport: agent.
	AgentTunnels []AgentTunnel `json:"agentTunnels,omitempty"`
	// Status is what the nodes, etcd and the API server said.
	Status *report.Status `json:"status,omitempty"`
}

// AgentTunnel is the agent tunnel of a node with transport: agent.
type AgentTunnel struct {
	Node      string `json:"node"`
	Connected bool   `json:"connected"`
	// Hostname is the host the tunnel comes from, while connected.
	Hostname string `json:"hostname,omitempty"`
	// Replica is the replica of rigger serve that holds the tunnel, when
	// it is not the one that wrote the status (as last found).
	Replica string `json:"replica,omitempty"`
	// LastSeen is when the tunnel was last up (the time of the status
	// while it is); none when it has not been since serve started.
	LastSeen *time.Time `json:"last_seen,omitempty"`
}

// Source names the cluster.yml a status is about.
type Source struct {
	Repository string `json:"repository"`
	Branch     string `json:"branch"`
	Path       string `json:"path"`
	// Blob is the git blob of the cluster.yml acted on: a restarted serve
	// knows from it whether the file changed while it was away.
	Blob string `json:"blob,omitempty"`
}

// LastReconcile is one reconcile's trigger, time and outcome.
type LastReconcile struct {
	// Trigger is what started it: "change", "drift-check", "retry", "start".
	Trigger    string    `json:"trigger"`
	FinishedAt time.Time `json:"finishedAt"`
	Duration   string    `json:"duration"`
	// Steps are how many plan steps were carried out, and failed.
	Steps  int `json:"steps"`
	Failed int `json:"failed,omitempty"`
}

// Condition is one of the Flux-style conditions.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

// DriftRepair is a change that a drift check found and repaired: the
// nodes were not what the unchanged cluster.yml says.
type DriftRepair struct {
	RepairedAt time.Time `json:"repairedAt"`
	Node       string    `json:"node"`
	Component  string    `json:"component"`
	Action     string    `json:"action"`
	Reason     string    `json:"reason"`
	Error      string    `json:"error,omitempty"`
}

// SnapshotStatus is the etcd snapshot schedule's state.
type SnapshotStatus struct {
	// Last is the newest snapshot found.
	Last *SnapshotRef `json:"last,omitempty"`
	// Next is when the next scheduled snapshot is due.
	Next *time.Time `json:"next,omitempty"`
	// Error is the last scheduled snapshot's failure.
	Error string `json:"error,omitempty"`
	// Retained are the scheduled snapshots retention removed last time.
	Removed []string `json:"removed,omitempty"`
	// NotInS3 are the snapshots on the etcd nodes that S3 lacks (with
	// s3backupconfig set): the next run of the schedule uploads them.
	NotInS3 []string `json:"notInS3,omitempty"`
	// Uploaded are the snapshots S3 lacked that the last run uploaded.
	Uploaded []string `json:"uploaded,omitempty"`
}

// SnapshotRef is one snapshot.
type SnapshotRef struct {
	Name   string    `json:"name"`
	Kind   string    `json:"kind,omitempty"`
	Taken  time.Time `json:"taken"`
	Size   int64     `json:"size,omitempty"`
	SHA256 string    `json:"sha256,omitempty"`
}

// RestoreStatus is a restore request carried out.
type RestoreStatus struct {
	ID       string    `json:"id"`
	Snapshot string    `json:"snapshot"`
	At       time.Time `json:"at"`
	Error    string    `json:"error,omitempty"`
}

// maxDrift is how many drift repairs status.yml keeps.
const maxDrift = 20

// Condition types and statuses.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"

	conditionTrue    = "True"
	conditionFalse   = "False"
	conditionUnknown = "Unknown"
)

// Reasons of the conditions besides the failures' (stall.Reason).
const (
	// ReasonSucceeded: the nodes run what cluster.yml says.
	ReasonSucceeded = "ReconciliationSucceeded"
	// ReasonProgressing: the apply ran, and steps are still pending.
	ReasonProgressing = "Progressing"
	// ReasonSuspended: rigger.suspend is set.
	ReasonSuspended = "Suspended"
	// ReasonRetryScheduled: rigger tries again by itself.
	ReasonRetryScheduled = "RetryScheduled"
	// ReasonNodesUnreachable: nodes of cluster.yml did not answer and
	// were left as they are.
	ReasonNodesUnreachable = "NodesUnreachable"
	// ReasonDuplicateCluster: another cluster.yml has the same
	// cluster_name, or the cluster's state directory was made for another
	// one, or the name is serve's own directory's. Stalls.
	ReasonDuplicateCluster stall.Reason = "DuplicateCluster"
	// ReasonDecryptionFailed: the cluster.yml is encrypted with SOPS and
	// serve cannot decrypt it (no key of its recipients, or its MAC does
	// not match its values). Stalls: a push of the file, or serve started
	// again with its key, tries again.
	ReasonDecryptionFailed stall.Reason = "DecryptionFailed"
)

// maxText is the longest string status.yml holds, in bytes: errors and
// reasons can quote what cluster.yml or a node said at any length, and
// status.yml is committed at every change. A longer one keeps its start and
// says how much was cut.
const maxText = 4 << 10

// Marshal is the status.yml for f, every string in it at most maxText
// bytes long (clipText) and at most maxDrift drift repairs.
func (f *StatusFile) Marshal() ([]byte, error) {
	g := *f
	g.Drift = g.Drift[:min(len(g.Drift), maxDrift)]
	j, err := json.Marshal(&g)
	if err != nil {
		return nil, fmt.Errorf("write status.yml: %w", err)
	}
	var doc any
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return nil, fmt.Errorf("write status.yml: %w", err)
	}
	if j, err = json.Marshal(clipText(doc)); err != nil {
		return nil, fmt.Errorf("write status.yml: %w", err)
	}
	b, err := yaml.JSONToYAML(j)
	if err != nil {
		return nil, fmt.Errorf("write status.yml: %w", err)
	}
	return append([]byte(statusHeader), b...), nil
}

// clipText cuts every string of a decoded JSON value, keys included, to
// maxText bytes (clip).
func clipText(v any) any {
	switch t := v.(type) {
	case string:
		return clipString(t)
	case []any:
		for i := range t {
			t[i] = clipText(t[i])
		}
	case map[string]any:
		for k, x := range t {
			if c := clipString(k); c != k {
				delete(t, k)
				k = c
			}
			t[k] = clipText(x)
		}
	}
	return v
}

// clipString is s when it is at most maxText bytes long, else its start
// (whole UTF-8 characters) followed by "… (N bytes cut)".
func clipString(s string) string {
	if len(s) <= maxText {
		return s
	}
	head := clip.Head(s, maxText)
	return fmt.Sprintf("%s… (%d bytes cut)", head, len(s)-len(head))
}

// volatile are the keys whose values change at every reconcile without the
// cluster changing: times of observation, and the last reconcile's trigger,
// time and counts. SameMeaning leaves
// them out, so that status.yml is committed only when something changed.
var volatile = []string{"observed_at", "lastReconcile", "last_seen"}

// MaxStatusSize is the largest status.yml rigger reads, in bytes: one it
// writes stays far below (maxText, maxDrift), and a larger one, pushed by
// someone else, is not parsed but replaced.
const MaxStatusSize = 4 << 20

// SameMeaning says whether two status.yml contents say the same thing, the
// times of observation aside. Content that does not parse, or is larger
// than MaxStatusSize, never means the same (it is replaced).
func SameMeaning(a, b []byte) bool {
	if len(a) > MaxStatusSize || len(b) > MaxStatusSize {
		return false
	}
	var va, vb any
	if yaml.Unmarshal(a, &va) != nil || yaml.Unmarshal(b, &vb) != nil {
		return false
	}
	ja, err1 := yaml.Marshal(dropVolatile(va))
	jb, err2 := yaml.Marshal(dropVolatile(vb))
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

func dropVolatile(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if slices.Contains(volatile, k) {
				delete(t, k)
				continue
			}
			t[k] = dropVolatile(x)
		}
	case []any:
		for i := range t {
			t[i] = dropVolatile(t[i])
		}
	}
	return v
}

// ParseStatus reads a status.yml; nil when there is none, it does not
// parse or it is larger than MaxStatusSize (it is then rewritten).
func ParseStatus(b []byte) *StatusFile {
	var f StatusFile
	if len(b) == 0 || len(b) > MaxStatusSize || yaml.Unmarshal(b, &f) != nil {
		return nil
	}
	return &f
}

// setCondition sets a condition, keeping its transition time when its
// status did not change.
func setCondition(conds []Condition, prev []Condition, c Condition) []Condition {
	for _, p := range prev {
		if p.Type == c.Type && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		}
	}
	return append(conds, c)
}
