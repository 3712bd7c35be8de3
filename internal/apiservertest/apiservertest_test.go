package apiservertest_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/internal/testwait"
)

// TestStart starts the API server with the controller manager and checks
// that it serves, that the controllers run (a new namespace gets its
// default ServiceAccount) and that authentication is on (an unknown token
// is refused).
func TestStart(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{ControllerManager: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc := kubernetes.NewForConfigOrDie(s.Config)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "start-test"}}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testwait.ForContext(ctx, t, 2*time.Minute, "the controller manager's default ServiceAccount in a new namespace", func(ctx context.Context) error {
		_, err := kc.CoreV1().ServiceAccounts("start-test").Get(ctx, "default", metav1.GetOptions{})
		return err
	})

	bad := rest.CopyConfig(s.Config)
	bad.BearerToken = "not-a-token"
	_, err := kubernetes.NewForConfigOrDie(bad).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("an unknown token: got %v, want 401 Unauthorized", err)
	}
}
