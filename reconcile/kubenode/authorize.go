package kubenode

import (
	"context"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeBinding is the ClusterRoleBinding that lets the kubelets act as
// nodes. They share the kube-node certificate (O=system:nodes, CN=system:node,
// as in RKE), which the Node authorizer does not know as any one node, so
// RBAC grants the group the system:node role, as RKE does.
const NodeBinding = "system:node"

// The ClusterRole and its binding that let the API servers (user
// kube-apiserver, their kubelet client certificate) reach the kubelets'
// API: `kubectl logs`, `exec`, `port-forward`, metrics. RKE's names.
const (
	APIServerProxyRole    = "proxy-clusterrole-kubeapiserver"
	APIServerProxyBinding = "proxy-role-binding-kubernetes-master"
)

// AuthorizeAPIServer makes the APIServerProxyRole and its binding to the
// user kube-apiserver as RKE does (templates.KubeAPIClusterRole), with
// server-side apply under rigger's field manager.
func AuthorizeAPIServer(ctx context.Context, cs kubernetes.Interface) error {
	role := rbacv1ac.ClusterRole(APIServerProxyRole).WithRules(rbacv1ac.PolicyRule().
		WithAPIGroups("").
		WithResources("nodes/metrics", "nodes/proxy", "nodes/stats", "nodes/log", "nodes/spec").
		WithVerbs("get", "list", "watch", "create"))
	binding := rbacv1ac.ClusterRoleBinding(APIServerProxyBinding).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(APIServerProxyRole)).
		WithSubjects(rbacv1ac.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.UserKind).WithName("kube-apiserver"))
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	return retryAPI(ctx, func() error {
		if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, role, opts); err != nil {
			return err
		}
		_, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, binding, opts)
		return err
	})
}

// fieldManager is rigger's server-side apply field manager.
const fieldManager = "rigger"

// AuthorizeKubelets adds the system:nodes group to the NodeBinding
// ClusterRoleBinding (which the API server creates without subjects), or
// creates it.
func AuthorizeKubelets(ctx context.Context, cs kubernetes.Interface) error {
	subject := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}
	return retryAPI(ctx, func() error {
		crb, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, NodeBinding, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: NodeBinding},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: NodeBinding},
				Subjects:   []rbacv1.Subject{subject},
			}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if slices.Contains(crb.Subjects, subject) {
			return nil
		}
		crb.Subjects = append(crb.Subjects, subject)
		_, err = cs.RbacV1().ClusterRoleBindings().Update(ctx, crb, metav1.UpdateOptions{})
		return err
	})
}
