package kubenode

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestListNodesRetries: the API server's 500 for an etcd member that went
// away passes, and the Nodes are listed; an error that does not pass is
// returned at once; one that never passes is returned when ctx ends.
func TestListNodesRetries(t *testing.T) {
	// What kube-apiserver answered in the sandbox right after a node was
	// cut off (an etcd member's connection timed out).
	unavailable := apierrors.NewInternalError(errors.New("rpc error: code = Unavailable desc = error reading from server: read tcp 10.231.40.11:60078->10.231.40.13:2379: read: connection timed out"))
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC"))
	for _, tt := range []struct {
		name      string
		fail      int // calls that fail with err, then the list
		err       error
		wantCalls int
		wantErr   func(error) bool
	}{
		{name: "a 500 of etcd, then the list", fail: 1, err: unavailable, wantCalls: 2},
		{name: "forbidden: at once", fail: 100, err: forbidden, wantCalls: 1, wantErr: apierrors.IsForbidden},
		{name: "a 500 until ctx ends: the 500", fail: 100, err: unavailable, wantErr: apierrors.IsInternalError},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}})
			calls := 0
			cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				if calls <= tt.fail {
					return true, nil, tt.err
				}
				return false, nil, nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			nodes, err := ListNodes(ctx, cs)
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("err %v", err)
				}
			} else if err != nil || len(nodes) != 1 || nodes[0].Name != "node1" {
				t.Fatalf("nodes %v, err %v", nodes, err)
			}
			if tt.wantCalls != 0 && calls != tt.wantCalls {
				t.Errorf("%d calls, want %d", calls, tt.wantCalls)
			}
		})
	}
}
