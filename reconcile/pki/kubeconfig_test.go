package pki

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// The kubeconfig fields the test reads back, as client-go names them.
type parsedKubeconfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Clusters   []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthorityData []byte `json:"certificate-authority-data"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			ClientCertificateData []byte `json:"client-certificate-data"`
			ClientKeyData         []byte `json:"client-key-data"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
	CurrentContext string `json:"current-context"`
}

func TestKubeconfig(t *testing.T) {
	s, _ := mustEnsure(t, nil, threeNodes(), t0)
	ca, admin := s.Certs[CACertName], s.Certs[KubeAdminCertName]

	tests := []struct {
		name, cluster, server, user string
	}{
		{"admin", "prod", "https://10.0.0.1:6443", "kube-admin-prod"},
		{"names that need quoting", "a: b #c", "https://[fd00::1]:6443", "'user\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Kubeconfig(tt.cluster, tt.server, tt.user, ca.CertPEM, admin.CertPEM, admin.KeyPEM)
			var got parsedKubeconfig
			if err := yaml.UnmarshalStrict(b, &got); err != nil {
				t.Fatalf("parse kubeconfig: %v\n%s", err, b)
			}
			var want parsedKubeconfig
			want.APIVersion, want.Kind, want.CurrentContext = "v1", "Config", tt.cluster
			want.Clusters = make([]struct {
				Name    string `json:"name"`
				Cluster struct {
					Server                   string `json:"server"`
					CertificateAuthorityData []byte `json:"certificate-authority-data"`
				} `json:"cluster"`
			}, 1)
			want.Clusters[0].Name = tt.cluster
			want.Clusters[0].Cluster.Server = tt.server
			want.Clusters[0].Cluster.CertificateAuthorityData = ca.CertPEM
			want.Users = make([]struct {
				Name string `json:"name"`
				User struct {
					ClientCertificateData []byte `json:"client-certificate-data"`
					ClientKeyData         []byte `json:"client-key-data"`
				} `json:"user"`
			}, 1)
			want.Users[0].Name = tt.user
			want.Users[0].User.ClientCertificateData = admin.CertPEM
			want.Users[0].User.ClientKeyData = admin.KeyPEM
			want.Contexts = make([]struct {
				Name    string `json:"name"`
				Context struct {
					Cluster string `json:"cluster"`
					User    string `json:"user"`
				} `json:"context"`
			}, 1)
			want.Contexts[0].Name = tt.cluster
			want.Contexts[0].Context.Cluster = tt.cluster
			want.Contexts[0].Context.User = tt.user
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("kubeconfig (-want +got):\n%s", diff)
			}

			// What it holds is usable as a TLS client identity and CA.
			if _, err := tls.X509KeyPair(got.Users[0].User.ClientCertificateData, got.Users[0].User.ClientKeyData); err != nil {
				t.Errorf("client certificate and key: %v", err)
			}
			if !x509.NewCertPool().AppendCertsFromPEM(got.Clusters[0].Cluster.CertificateAuthorityData) {
				t.Error("certificate-authority-data is not a PEM certificate")
			}
		})
	}
}
