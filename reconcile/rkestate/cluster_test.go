package rkestate

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestFromCluster reads RKE's state where RKE keeps it in the cluster: the
// Secret first, the ConfigMap of older RKE without one.
func TestFromCluster(t *testing.T) {
	state := stateJSON(t, nil)
	meta := metav1.ObjectMeta{Namespace: "kube-system", Name: FullStateName}
	tests := []struct {
		name       string
		objects    []any
		wantSource string
		wantErr    string
	}{
		{"Secret", []any{&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{FullStateName: state}},
			&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{FullStateName: "{}"}}}, "Secret kube-system/full-cluster-state", ""},
		{"ConfigMap of older RKE", []any{&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{FullStateName: string(state)}}}, "ConfigMap kube-system/full-cluster-state", ""},
		{"neither", nil, "", "neither a Secret nor a ConfigMap kube-system/full-cluster-state"},
		{"Secret without the key", []any{&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"x": state}}}, "", "read Secret kube-system/full-cluster-state: it has no key full-cluster-state"},
		{"damaged", []any{&corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{FullStateName: state[:100]}}}, "", "read Secret kube-system/full-cluster-state: the JSON ends early"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := fake.NewClientset()
			for _, o := range tt.objects {
				var err error
				switch o := o.(type) {
				case *corev1.Secret:
					_, err = k.CoreV1().Secrets("kube-system").Create(context.Background(), o, metav1.CreateOptions{})
				case *corev1.ConfigMap:
					_, err = k.CoreV1().ConfigMaps("kube-system").Create(context.Background(), o, metav1.CreateOptions{})
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			st, err := FromCluster(context.Background(), k)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				noSecrets(t, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.Source != tt.wantSource || st.Certs["kube-ca"].KeyPEM == nil {
				t.Errorf("source %q, CA key read %v; want %q and the CA's key", st.Source, st.Certs["kube-ca"].KeyPEM != nil, tt.wantSource)
			}
		})
	}
}
