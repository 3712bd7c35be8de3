package pki

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

func TestNodeFiles(t *testing.T) {
	req := threeNodes()
	req.Nodes = append(req.Nodes,
		Node{Name: "10.0.0.7", Address: "10.0.0.7", InternalAddress: "10.0.0.7", Hostname: "worker7", Worker: true},
		Node{Name: "10.0.0.8", Address: "10.0.0.8", InternalAddress: "10.0.0.8", Hostname: "etcd8", Etcd: true},
	)
	s, _ := mustEnsure(t, nil, req, t0)
	common := []string{
		"/etc/kubernetes/ssl/kube-ca.pem",
		"/etc/kubernetes/ssl/kube-node-key.pem", "/etc/kubernetes/ssl/kube-node.pem",
		"/etc/kubernetes/ssl/kube-proxy-key.pem", "/etc/kubernetes/ssl/kube-proxy.pem",
		"/etc/kubernetes/ssl/kubecfg-kube-node.yaml", "/etc/kubernetes/ssl/kubecfg-kube-proxy.yaml",
	}

	t.Run("worker", func(t *testing.T) {
		files, err := NodeFiles(s, req, req.Nodes[3])
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(common, slices.Sorted(maps.Keys(files))); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
	})

	t.Run("etcd only", func(t *testing.T) {
		files, err := NodeFiles(s, req, req.Nodes[4])
		if err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(common), "/etc/kubernetes/ssl/kube-etcd-10-0-0-8.pem", "/etc/kubernetes/ssl/kube-etcd-10-0-0-8-key.pem")
		slices.Sort(want)
		if diff := cmp.Diff(want, slices.Sorted(maps.Keys(files))); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
		if string(files["/etc/kubernetes/ssl/kube-etcd-10-0-0-8-key.pem"]) != string(s.Certs["kube-etcd-10-0-0-8"].KeyPEM) {
			t.Error("etcd key is not the set's")
		}
	})

	t.Run("controlplane: the whole PKI, recoverable", func(t *testing.T) {
		files, err := NodeFiles(s, req, req.Nodes[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{
			"/etc/kubernetes/ssl/kube-ca-key.pem",
			"/etc/kubernetes/ssl/kube-service-account-token-key.pem",
			"/etc/kubernetes/ssl/kubecfg-kube-controller-manager.yaml",
			"/etc/kubernetes/ssl/kubecfg-kube-scheduler.yaml",
		} {
			if files[p] == nil {
				t.Errorf("no %s", p)
			}
		}
		got, err := FromFiles(files)
		if err != nil {
			t.Fatalf("FromFiles: %v", err)
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("PKI recovered from a controlplane node (-want +got):\n%s", diff)
		}
	})

	t.Run("kubeconfigs", func(t *testing.T) {
		files, err := NodeFiles(s, req, req.Nodes[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{KubeNodeCertName, KubeProxyCertName, KubeControllerCertName, KubeSchedulerCertName} {
			var kc parsedKubeconfig
			if err := yaml.Unmarshal(files[KubeconfigPath(name)], &kc); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if kc.Clusters[0].Cluster.Server != "https://127.0.0.1:6443" || kc.Users[0].Name != name ||
				string(kc.Users[0].User.ClientCertificateData) != string(s.Certs[name].CertPEM) ||
				string(kc.Clusters[0].Cluster.CertificateAuthorityData) != string(s.Certs[CACertName].CertPEM) {
				t.Errorf("%s kubeconfig: server %s, user %s", name, kc.Clusters[0].Cluster.Server, kc.Users[0].Name)
			}
		}
	})

	t.Run("missing certificate", func(t *testing.T) {
		_, err := NodeFiles(&Set{Certs: map[string]Cert{CACertName: s.Certs[CACertName]}}, req, req.Nodes[3])
		if err == nil || !strings.Contains(err.Error(), "no kube-node: run Ensure first") {
			t.Errorf("err = %v", err)
		}
		if _, err := NodeFiles(nil, req, req.Nodes[3]); err == nil {
			t.Error("NodeFiles(nil) gave no error")
		}
	})
}

func TestAdminKubeconfig(t *testing.T) {
	req := threeNodes()
	s, _ := mustEnsure(t, nil, req, t0)
	tests := []struct {
		name       string
		edit       func(r *Request)
		wantServer string
		wantErr    string
	}{
		{name: "first controlplane node", edit: func(r *Request) { r.Nodes[0].ControlPlane = false }, wantServer: "https://10.0.0.2:6443"},
		{name: "IPv6 address", edit: func(r *Request) { r.Nodes[0].Address = "fd00::1" }, wantServer: "https://[fd00::1]:6443"},
		{name: "no controlplane", edit: func(r *Request) {
			for i := range r.Nodes {
				r.Nodes[i].ControlPlane = false
			}
		}, wantErr: "cluster prod has no controlplane node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := threeNodes()
			tt.edit(&r)
			b, err := AdminKubeconfig(s, r)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kc parsedKubeconfig
			if err := yaml.Unmarshal(b, &kc); err != nil {
				t.Fatal(err)
			}
			if kc.Clusters[0].Cluster.Server != tt.wantServer || kc.Users[0].Name != "kube-admin-prod" || kc.CurrentContext != "prod" {
				t.Errorf("server %s, user %s, context %s", kc.Clusters[0].Cluster.Server, kc.Users[0].Name, kc.CurrentContext)
			}
			if string(kc.Users[0].User.ClientKeyData) != string(s.Certs[KubeAdminCertName].KeyPEM) {
				t.Error("the admin kubeconfig does not hold kube-admin's key")
			}
		})
	}
}
