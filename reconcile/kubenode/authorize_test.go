package kubenode

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestAuthorizeAPIServer: the API servers' ClusterRole and binding, as RKE
// makes them, applied again without change.
func TestAuthorizeAPIServer(t *testing.T) {
	cs := fake.NewClientset()
	for range 2 {
		if err := AuthorizeAPIServer(t.Context(), cs); err != nil {
			t.Fatal(err)
		}
	}
	role, err := cs.RbacV1().ClusterRoles().Get(t.Context(), APIServerProxyRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 1 || !slices.Contains(role.Rules[0].Resources, "nodes/proxy") || !slices.Contains(role.Rules[0].Verbs, "create") {
		t.Errorf("rules %+v", role.Rules)
	}
	b, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), APIServerProxyBinding, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "kube-apiserver"}
	if b.RoleRef.Name != APIServerProxyRole || !slices.Equal(b.Subjects, []rbacv1.Subject{want}) {
		t.Errorf("binding %+v", b)
	}
}
