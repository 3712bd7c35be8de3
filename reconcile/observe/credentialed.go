package observe

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/reconcile/etcdmember"
)

// The second pass of an observation reads, with the cluster's
// certificates, what the first pass (Observe) cannot: the etcd membership
// and the Nodes the API server lists. The caller gives the clients, made
// from the first pass (the members and the API server are reached through
// the nodes found reachable).

// MemberLister lists the etcd cluster's members (an etcdmember.Client).
type MemberLister interface {
	Members(ctx context.Context) ([]etcdmember.Member, error)
	Close() error
}

// EtcdMembers reads the etcd cluster's membership into o when a member
// answers, through the client connect gives; without one (a new cluster,
// or every member down) o.Etcd stays nil, with o.EtcdErr saying why, and
// the plan makes no membership change. It returns the error of members
// that were reached and did not list the membership (worth a warning,
// unlike no member to reach).
func EtcdMembers(ctx context.Context, o *Cluster, connect func(ctx context.Context) (MemberLister, error)) (listErr error) {
	cli, err := connect(ctx)
	if err != nil {
		o.EtcdErr = err
		return nil
	}
	defer cli.Close()
	members, err := cli.Members(ctx)
	if err != nil {
		o.EtcdErr = err
		return err
	}
	o.Etcd = &Etcd{Members: members}
	return nil
}

// NodeListTimeout bounds the listing of the Nodes, its retries included:
// an API server that does not answer makes the plan go on without them.
// Right after an etcd member goes away, the API server answers a
// resource's first call with a 500 after about 10 s, until its etcd client
// gives the member up; the next call is answered. One such answer must not
// leave the plan without the Nodes, and so without the add-ons' plan (the
// network plugin was then applied again, another 30 s of such answers).
const NodeListTimeout = 15 * time.Second

// Nodes lists the Nodes into o with list (within NodeListTimeout) and
// links them to machines (Link); a list that fails is recorded in
// o.Kubernetes.Err.
func Nodes(ctx context.Context, o *Cluster, machines []Machine, list func(ctx context.Context) ([]corev1.Node, error)) {
	o.Kubernetes = &Kubernetes{}
	ctx, cancel := context.WithTimeout(ctx, NodeListTimeout)
	defer cancel()
	nodes, err := list(ctx)
	if err != nil {
		o.Kubernetes.Err = err
		return
	}
	o.Kubernetes.Nodes = nodes
	o.Kubernetes.Link = Link(machines, nodes)
}
