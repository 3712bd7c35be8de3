package observe

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/reconcile/etcdmember"
)

type lister struct {
	members []etcdmember.Member
	err     error
	closed  bool
}

func (l *lister) Members(context.Context) ([]etcdmember.Member, error) { return l.members, l.err }
func (l *lister) Close() error                                         { l.closed = true; return nil }

// TestEtcdMembers: the membership is recorded when a member lists it; no
// member to reach and a failed listing are recorded, only the latter
// returned (worth a warning), and the client is closed.
func TestEtcdMembers(t *testing.T) {
	ctx := context.Background()
	o := &Cluster{}
	noMember := errors.New("no reachable node runs an etcd member")
	if err := EtcdMembers(ctx, o, func(context.Context) (MemberLister, error) { return nil, noMember }); err != nil || o.Etcd != nil || o.EtcdErr != noMember {
		t.Errorf("no member: returned %v, etcd %+v, EtcdErr %v", err, o.Etcd, o.EtcdErr)
	}
	failing := &lister{err: errors.New("context deadline exceeded")}
	o = &Cluster{}
	if err := EtcdMembers(ctx, o, func(context.Context) (MemberLister, error) { return failing, nil }); err != failing.err || o.Etcd != nil || !failing.closed {
		t.Errorf("failed listing: returned %v, etcd %+v, closed %v", err, o.Etcd, failing.closed)
	}
	ok := &lister{members: []etcdmember.Member{{ID: 1, Name: "etcd-a", Healthy: true}}}
	o = &Cluster{}
	if err := EtcdMembers(ctx, o, func(context.Context) (MemberLister, error) { return ok, nil }); err != nil || o.Etcd == nil || len(o.Etcd.Members) != 1 || !ok.closed {
		t.Errorf("listed: returned %v, etcd %+v, closed %v", err, o.Etcd, ok.closed)
	}
}

// TestNodes: the Nodes are listed and linked to the machines; a failed
// list is recorded, not returned.
func TestNodes(t *testing.T) {
	ctx := context.Background()
	o := &Cluster{}
	down := errors.New("connect to the API server: no controlplane node is reachable")
	Nodes(ctx, o, nil, func(context.Context) ([]corev1.Node, error) { return nil, down })
	if o.Kubernetes == nil || o.Kubernetes.Err != down || o.Kubernetes.Link != nil {
		t.Errorf("failed list: %+v", o.Kubernetes)
	}
	node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	o = &Cluster{}
	Nodes(ctx, o, []Machine{{Address: "10.0.0.1", Hostname: "n1"}}, func(ctx context.Context) ([]corev1.Node, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the list has no deadline")
		}
		return []corev1.Node{node}, nil
	})
	if k := o.Kubernetes; k == nil || k.Err != nil || len(k.Nodes) != 1 || k.Link == nil || k.Link.Owned["10.0.0.1"] == nil {
		t.Errorf("listed: %+v", o.Kubernetes)
	}
}
