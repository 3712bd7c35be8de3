package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/secretstate"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// TestStateCommandRefusals: rigger state refuses, before it reaches any
// API server, what it cannot move.
func TestStateCommandRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no cluster", []string{"state", "export"}, "give the cluster: --cluster"},
		{"import of no directory", []string{"state", "import", "--cluster", "c", "--state-dir", filepath.Join(t.TempDir(), "none")},
			"give its rigger apply's state directory (--state-dir)"},
		{"no kubeconfig", []string{"state", "export", "--cluster", "c", "--state-dir", t.TempDir(), "--kubeconfig", filepath.Join(t.TempDir(), "none")},
			"give --kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			root := newRootCommand(&out, &out)
			root.SetArgs(tc.args)
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rigger %s: got %v, want an error that says %q", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
}

// TestServeStateBackendFlags: --state-backend takes directory (no
// backend) or kubernetes, which needs --state-dir as its working copy.
func TestServeStateBackendFlags(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, backend := range []string{"", stateBackendDirectory} {
		o := serveOptions{stateBackend: backend}
		if st, err := o.stateStore(log); st.load != nil || err != nil {
			t.Errorf("--state-backend %q: got %v, %v; want no backend", backend, st.load != nil, err)
		}
	}
	var o serveOptions
	o = serveOptions{stateBackend: "etcd"}
	if _, err := o.stateStore(log); err == nil || !strings.Contains(err.Error(), "give directory or kubernetes") {
		t.Errorf("an unknown backend: got %v", err)
	}
	o = serveOptions{stateBackend: stateBackendKubernetes}
	if _, err := o.stateStore(log); err == nil || !strings.Contains(err.Error(), "give --state-dir") {
		t.Errorf("kubernetes without --state-dir: got %v", err)
	}
	o = serveOptions{stateBackend: stateBackendKubernetes, stateDir: t.TempDir(), kubeconfig: filepath.Join(t.TempDir(), "none")}
	if _, err := o.stateStore(log); err == nil || !strings.Contains(err.Error(), "--state-backend kubernetes") {
		t.Errorf("kubernetes with a kubeconfig that is not there: got %v", err)
	}
}

// TestStateImportExport moves a state directory made by the pki package
// into the Secrets of a real API server (RIGGER_E2E=1) with `rigger state
// import` and back into another directory with `rigger state export`: the
// same bytes, what was moved said, and neither replaces state without
// --force.
func TestStateImportExport(t *testing.T) {
	srv := apiservertest.Start(t, apiservertest.Options{})
	client, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: defaultStateNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: srv.Config.Host, CertificateAuthorityData: srv.Config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: srv.Config.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	c := &spec.Cluster{ClusterName: "prod", Nodes: []spec.Node{{Address: "10.0.0.1", User: "u", Role: []string{spec.RoleEtcd, spec.RoleControlPlane, spec.RoleWorker}}}}
	spec.SetDefaults(c)
	set, _, err := pki.Ensure(nil, pki.RequestFor(c), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	laptop := filepath.Join(t.TempDir(), "prod")
	if err := pki.Save(laptop, set); err != nil {
		t.Fatal(err)
	}
	if err := statedir.WriteJSON(laptop, "nodes.json", c.Nodes); err != nil {
		t.Fatal(err)
	}
	rigger := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append(args, "--cluster", "prod", "--kubeconfig", kubeconfig))
		err := root.Execute()
		return out.String(), err
	}

	out, err := rigger("state", "import", "--state-dir", laptop)
	if err != nil {
		t.Fatalf("rigger state import: %v\n%s", err, out)
	}
	want, err := secretstate.StateFiles(laptop)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf("imported %d file(s) of cluster prod from %s into Secrets of namespace rigger-system", len(want), laptop)) ||
		!strings.Contains(out, "  kube-ca-key.pem (") || strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("rigger state import says:\n%s\nwant the %d files moved, no content", out, len(want))
	}
	if out, err := rigger("state", "import", "--state-dir", laptop); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a second import without --force: %v\n%s", err, out)
	}

	back := filepath.Join(t.TempDir(), "prod")
	if out, err := rigger("state", "export", "--state-dir", back); err != nil {
		t.Fatalf("rigger state export: %v\n%s", err, out)
	}
	got, err := secretstate.StateFiles(back)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("exported %d files, imported %d", len(got), len(want))
	}
	for f, b := range want {
		if !bytes.Equal(got[f], b) {
			t.Errorf("%s: exported, not the bytes imported", f)
		}
	}
	if _, err := pki.Load(back); err != nil {
		t.Errorf("the exported PKI does not load: %v", err)
	}
	if out, err := rigger("state", "export", "--state-dir", back); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a second export without --force: %v\n%s", err, out)
	}
	if out, err := rigger("state", "export", "--state-dir", back, "--force"); err != nil {
		t.Errorf("a second export with --force: %v\n%s", err, out)
	}
}
