package kubenode

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

func TestStateRoundTrip(t *testing.T) {
	ctx := context.Background()
	c, diags := spec.Parse([]byte(`cluster_name: c1
kubernetes_version: v1.31.5-rancher1-1
nodes:
  - address: 10.0.0.1
    hostname_override: n1
    role: [etcd, controlplane, worker]
    user: root
    ssh_key: "-----BEGIN OPENSSH PRIVATE KEY----- secret"
    labels: {a: b}
`), "cluster.yml")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	set, _, err := pki.Ensure(nil, pki.RequestFor(c), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	if _, _, err := LoadState(ctx, cs); !errors.As(err, new(*NoStateError)) {
		t.Fatalf("LoadState without the Secret: %v, want a NoStateError", err)
	}
	for range 2 { // create, then update an equal one
		if err := SaveState(ctx, cs, c, set); err != nil {
			t.Fatal(err)
		}
	}
	sec, err := cs.CoreV1().Secrets(StateNamespace).Get(ctx, StateSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(sec.Data[StateKey]); strings.Contains(s, "secret") || strings.Contains(s, "ssh") {
		t.Errorf("the state holds SSH material: %s", s)
	}
	got, st, err := LoadState(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(set.Names(), got.Names()); diff != "" {
		t.Errorf("PKI names (-want +got):\n%s", diff)
	}
	for _, name := range set.Names() {
		if !cmp.Equal(set.Certs[name], got.Certs[name]) {
			t.Errorf("%s differs", name)
		}
	}
	if diff := cmp.Diff(StateOf(c), st); diff != "" {
		t.Errorf("state (-want +got):\n%s", diff)
	}
}
