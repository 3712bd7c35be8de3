package registryauth_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/dockerop"
	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// TestRegistriesSandbox: a cluster whose helper image and a pod's image
// are in a private registry behind htpasswd auth (Debian's docker-registry
// on the sandbox's bridge, over TLS), on one sandbox node that has neither
// image. With a wrong password the apply stops at the first pull, with an
// error that names the node, the image and the registry; with the right one
// rigger's pulls carry the credentials and the cluster converges, and the
// kubelet pulls the pod's image with the credentials rke-tools' entrypoint
// wrote to /var/lib/kubelet/config.json.
func TestRegistriesSandbox(t *testing.T) {
	s := sandboxtest.Start(t, sandbox.Options{Subnet: 21, Nodes: 1, Images: true})
	ctx, cancel := rt.UntilTestDeadline(t)
	defer cancel()
	n := s.Nodes[0]
	reg := sandboxtest.StartRegistry(ctx, t, s, "rigger", "registry-s3cret")
	cli := sandboxtest.DockerClient(t, n)
	helper := reg.Push(ctx, t, cli, s.SystemImages["alpine"], "sandbox/tools:private")
	pause := reg.Push(ctx, t, cli, s.SystemImages["pod_infra_container"], "sandbox/pause:private")

	a := rt.New(t)
	cluster := func(password string) *spec.Cluster {
		return rt.Cluster(t, s, rt.Roles(1), func(c *spec.Cluster) {
			rt.NetworkOnly(c)
			c.SystemImages.Alpine = helper
			c.PrivateRegistries = []spec.PrivateRegistry{{URL: reg.Host, User: reg.User, Password: password}}
		})
	}

	t.Run("wrong password", func(t *testing.T) {
		_, _, err := a.TryApply(ctx, t, cluster("wrong-password"))
		var ie *dockerop.ImageError
		if !errors.As(err, &ie) {
			t.Fatalf("apply with a wrong password: %v; want a failed pull", err)
		}
		t.Logf("apply with a wrong password: %v", err)
		for _, want := range []string{"node " + n.Address, helper, "private registry " + reg.Host, `user "rigger"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "wrong-password") {
			t.Errorf("error %q shows the password", err)
		}
	})

	c := cluster(reg.Password)
	if !t.Run("converge", func(t *testing.T) { a.Apply(ctx, t, c) }) {
		return
	}

	t.Run("kubelet", func(t *testing.T) {
		file := filepath.Join(n.Dir, "var-lib-kubelet", "config.json")
		auth := base64.StdEncoding.EncodeToString([]byte(reg.User + ":" + reg.Password))
		if b, err := os.ReadFile(file); err != nil {
			t.Errorf("the kubelet's Docker config: %v", err)
		} else if want := `{"auths":{"` + reg.Host + `":{"auth":"` + auth + `"}}}`; string(b) != want {
			t.Errorf("the kubelet's Docker config is %s, want %s", b, want)
		}
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("the kubelet's Docker config has mode %v, want 0600", fi.Mode().Perm())
		}
		cs := a.Client(ctx, t, c)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "private-image", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "pause", Image: pause, ImagePullPolicy: corev1.PullAlways,
			}}},
		}
		if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// A failed pull fails the test at once: the registry is local.
		testwait.ForContext(ctx, t, 3*time.Minute, "the pod of the private image "+pause+" running", func(ctx context.Context) error {
			p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return err // the API server may be busy; the timeout bounds this
			}
			for _, st := range p.Status.ContainerStatuses {
				if w := st.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
					t.Fatalf("the pod of the private image %s does not run: %s: %s", pause, w.Reason, w.Message)
				}
			}
			if p.Status.Phase != corev1.PodRunning {
				return fmt.Errorf("the pod is %s", p.Status.Phase)
			}
			return nil
		})
	})
}
