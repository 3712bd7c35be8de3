package reconcile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// apiServerLocal is the API server as seen from a controlplane node.
const apiServerLocal = "127.0.0.1:" + pki.APIServerPort

// KubeClient returns a client-go client of the cluster's API server as the
// admin (kube-admin), connected through the transport to the loopback of
// a reachable controlplane node: the API server need not be reachable from
// where rigger runs. The first reachable controlplane node of o in
// cluster.yml order serves, the others when its connection fails.
func (s *Session) KubeClient(set *pki.Set, o *observe.Cluster) (*kubernetes.Clientset, error) {
	var cps []string
	for _, n := range s.c.Nodes {
		if slices.Contains(n.Role, spec.RoleControlPlane) {
			if on := o.Nodes[n.Address]; on != nil && on.Reachable {
				cps = append(cps, n.Address)
			}
		}
	}
	if len(cps) == 0 {
		return nil, errors.New("connect to the API server: no controlplane node is reachable")
	}
	ca, admin := set.Certs[pki.CACertName], set.Certs[pki.KubeAdminCertName]
	cfg := &rest.Config{
		// The name the API server's certificate holds for its loopback.
		Host: "https://" + apiServerLocal,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: ca.CertPEM, CertData: admin.CertPEM, KeyData: admin.KeyPEM,
		},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var errs []error
			for _, node := range cps {
				conn, err := s.tr.Dial(ctx, node, network, apiServerLocal)
				if err == nil {
					return conn, nil
				}
				errs = append(errs, err)
			}
			return nil, errors.Join(errs...)
		},
		UserAgent: "rigger",
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to the API server: %w", err)
	}
	return cs, nil
}

// apiBackoff spaces the retries of a call the API server failed for a
// passing reason (about a minute in all): an API server whose etcd lost a
// member answers Unavailable until its client moves on.
var apiBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 8, Cap: 15 * time.Second}

// retriable reports whether an API error may pass on its own.
func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsUnexpectedServerError(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err)
}

// nodeBinding is the ClusterRoleBinding that lets the kubelets act as
// nodes. They share the kube-node certificate (O=system:nodes, CN=system:node,
// as in RKE), which the Node authorizer does not know as any one node, so
// RBAC grants the group the system:node role, as RKE does.
const nodeBinding = "system:node"

// ensureNodeAuthorization adds the system:nodes group to the system:node
// ClusterRoleBinding (which the API server creates without subjects), or
// creates it.
func ensureNodeAuthorization(ctx context.Context, cs kubernetes.Interface) error {
	subject := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:nodes"}
	return retry.OnError(apiBackoff, retriable, func() error {
		crb, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, nodeBinding, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: nodeBinding},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: nodeBinding},
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
