package etcdsnap

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/spec"
)

// Cluster is what the snapshot operations (Save, List, Delete, Restore,
// Scheduled) work on: a cluster's etcd nodes as cluster.yml describes them,
// its certificates, and how to reach its nodes. The reconcile session makes
// it; nothing here reads cluster.yml or the state directory.
type Cluster struct {
	// Name is cluster_name; KubernetesVersion kubernetes_version. Both go
	// into every sidecar.
	Name, KubernetesVersion string
	// Desired is the cluster as package desired builds it: its etcd nodes
	// (in cluster.yml order) and their etcd containers.
	Desired *desired.Cluster
	// Backup is services.etcd.backup_config, nil when unset.
	Backup *spec.BackupConfig
	// External is set when services.etcd.external_urls is: rigger runs no
	// etcd of this cluster.
	External bool
	// PKI is the cluster's certificates: the CA's fingerprint goes into
	// sidecars, and the kube-node certificate reaches etcd.
	PKI *pki.Set
	// Engine gives a node's Docker engine and Dial dials from a node
	// (transport.Transport's methods).
	Engine func(ctx context.Context, node string) (dockerop.Engine, error)
	Dial   health.Dialer
	// HelperImage runs the file tools on the nodes (system_images.alpine).
	HelperImage string
	// MaxParallel bounds the nodes worked on at once (rigger.max_parallel).
	MaxParallel int
	Log         *slog.Logger
	Now         func() time.Time

	// Taker names who takes the scheduled snapshots in the slot record
	// (SlotRecord.Taker): "rigger serve", or "etcd-rolling-snapshots on
	// <node>". Slots opens the store where scheduled snapshots' slots are
	// claimed (the cluster's etcd), and a function that closes it; nil
	// leaves the decision to the snapshots listed alone (one taker).
	Taker string
	Slots func(ctx context.Context) (SlotStore, func(), error)

	// Reapply plans and applies cluster.yml once the restored data is in
	// place, its progress told to hooks, and returns why the add-ons are
	// not ready yet (nil when they are: their pods restart on their own
	// once the API servers are back, so it is no error of the apply);
	// Members lists the etcd members afterwards. Only Restore uses them.
	Reapply func(ctx context.Context, hooks plan.Hooks) (addonsErr, err error)
	Members func(ctx context.Context) ([]etcdmember.Member, error)
}

// etcdNode is an etcd node of cluster.yml as desired builds it.
type etcdNode struct {
	node *desired.Node
	etcd *desired.Container
}

// etcdNodes are cluster.yml's etcd nodes, in its order, with their etcd
// containers' desired specs.
func etcdNodes(d *desired.Cluster) []etcdNode {
	var out []etcdNode
	for i := range d.Nodes {
		n := &d.Nodes[i]
		for j := range n.Containers {
			if n.Containers[j].Name == desired.Etcd {
				out = append(out, etcdNode{node: n, etcd: &n.Containers[j]})
			}
		}
	}
	return out
}

// members are the cluster's etcd nodes, at least one.
func (cl *Cluster) members(verb string) ([]etcdNode, error) {
	members := etcdNodes(cl.Desired)
	if len(members) == 0 {
		return nil, errors.New(verb + ": cluster.yml has no etcd node")
	}
	return members, nil
}

// addresses are the etcd nodes' addresses, in cluster.yml order.
func addresses(members []etcdNode) []string {
	out := make([]string, len(members))
	for i, m := range members {
		out[i] = m.node.Address
	}
	return out
}

// checker probes etcd and the API servers with the kube-node certificate.
func (cl *Cluster) checker() (*health.Checker, error) {
	cfg, err := cl.PKI.ClientTLS()
	if err != nil {
		return nil, err
	}
	return &health.Checker{Dial: cl.Dial, TLS: cfg}, nil
}

// interval is backup_config.interval_hours, or its default.
func (cl *Cluster) interval() time.Duration {
	hours := spec.DefaultEtcdIntervalHours
	if cl.Backup != nil && cl.Backup.IntervalHours > 0 {
		hours = cl.Backup.IntervalHours
	}
	return time.Duration(hours) * time.Hour
}

// logger is cl.Log, or a logger that discards.
func (cl *Cluster) logger() *slog.Logger {
	if cl.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return cl.Log
}

func (cl *Cluster) s3Config() *spec.S3BackupConfig {
	if cl.Backup != nil {
		return cl.Backup.S3BackupConfig
	}
	return nil
}

// serialized calls f one call at a time; a nil f is a no-op.
func serialized(f func(node, msg string)) func(node, msg string) {
	var mu sync.Mutex
	return func(node, msg string) {
		if f != nil {
			mu.Lock()
			defer mu.Unlock()
			f(node, msg)
		}
	}
}
