package pki

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNodePath(t *testing.T) {
	c, k := NodePath("kube-apiserver")
	if c != "/etc/kubernetes/ssl/kube-apiserver.pem" || k != "/etc/kubernetes/ssl/kube-apiserver-key.pem" {
		t.Errorf("NodePath = %s, %s", c, k)
	}
	if got := KubeconfigPath("kube-node"); got != "/etc/kubernetes/ssl/kubecfg-kube-node.yaml" {
		t.Errorf("KubeconfigPath = %s", got)
	}
}

func TestSaveLoad(t *testing.T) {
	s, _ := mustEnsure(t, nil, threeNodes(), t0)
	dir := filepath.Join(t.TempDir(), "state", "pki")
	if err := Save(dir, s); err != nil {
		t.Fatalf("Save: %v", err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("Load after Save (-saved +loaded):\n%s", diff)
	}

	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("state directory mode %#o, want 0700", perm)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(s.Certs); len(entries) != want {
		t.Errorf("%d files in the state directory, want %d (no temporary files left)", len(entries), want)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", e.Name(), perm)
		}
	}

	// Saving a smaller set removes the files it no longer has.
	smaller := threeNodes()
	smaller.Nodes[2].Etcd = false
	s2, _ := mustEnsure(t, s, smaller, t0)
	if err := Save(dir, s2); err != nil {
		t.Fatalf("Save: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-etcd-192-168-0-3-key.pem")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale key file: %v", err)
	}
	got, err = Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if diff := cmp.Diff(s2, got); diff != "" {
		t.Errorf("Load after the second Save (-saved +loaded):\n%s", diff)
	}
}

func TestSaveTightensDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s, _ := mustEnsure(t, nil, threeNodes(), t0)
	if err := Save(dir, s); err != nil {
		t.Fatalf("Save: %v", err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("state directory mode %#o, want 0700", perm)
	}
}

func TestLoadErrors(t *testing.T) {
	s, _ := mustEnsure(t, nil, threeNodes(), t0)
	other, _ := mustEnsure(t, nil, threeNodes(), t0)

	tests := []struct {
		name     string
		prepare  func(t *testing.T, dir string) string // returns the dir to load
		notFound bool
		wantErr  string
	}{
		{
			name:     "missing directory",
			prepare:  func(t *testing.T, dir string) string { return filepath.Join(dir, "nope") },
			notFound: true,
		},
		{
			name:     "empty directory",
			prepare:  func(t *testing.T, dir string) string { return dir },
			notFound: true,
		},
		{
			name: "key readable by others",
			prepare: func(t *testing.T, dir string) string {
				save(t, dir, s)
				chmod(t, filepath.Join(dir, "kube-admin-key.pem"), 0o644)
				return dir
			},
			wantErr: "chmod 600",
		},
		{
			name: "certificate of another CA",
			prepare: func(t *testing.T, dir string) string {
				save(t, dir, s)
				write(t, filepath.Join(dir, "kube-node.pem"), other.Certs[KubeNodeCertName].CertPEM)
				write(t, filepath.Join(dir, "kube-node-key.pem"), other.Certs[KubeNodeCertName].KeyPEM)
				return dir
			},
			wantErr: "kube-node: not signed by kube-ca",
		},
		{
			name: "CA key missing",
			prepare: func(t *testing.T, dir string) string {
				save(t, dir, s)
				if err := os.Remove(filepath.Join(dir, "kube-ca-key.pem")); err != nil {
					t.Fatal(err)
				}
				return dir
			},
			wantErr: "read kube-ca: no private key",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.prepare(t, t.TempDir())
			got, err := Load(dir)
			if got != nil {
				t.Error("Load returned a set with its error")
			}
			var nf *NotFoundError
			if isNF := errors.As(err, &nf); isNF != tt.notFound {
				t.Fatalf("err = %v; NotFoundError: %v, want %v", err, isNF, tt.notFound)
			}
			if tt.notFound {
				if nf.Dir != dir || !strings.Contains(err.Error(), "recover them from a control-plane node") {
					t.Errorf("NotFoundError %+v: %v", nf, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("error holds PEM material: %v", err)
			}
		})
	}
}

func TestFromFiles(t *testing.T) {
	s, _ := mustEnsure(t, nil, threeNodes(), t0)
	other, _ := mustEnsure(t, nil, threeNodes(), t0)

	t.Run("round trip", func(t *testing.T) {
		files := Files(s)
		files["/etc/kubernetes/ssl/kubecfg-kube-node.yaml"] = []byte("ignored")
		got, err := FromFiles(files)
		if err != nil {
			t.Fatalf("FromFiles: %v", err)
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("FromFiles(Files(s)) (-want +got):\n%s", diff)
		}
	})

	t.Run("the external etcd's files beside them are not the PKI's", func(t *testing.T) {
		files := Files(s)
		ext := selfSigned(t, "etcd-ca", false)
		for _, name := range []string{ExternalEtcdCACertName, ExternalEtcdClientCertName} {
			c, k := NodePath(name)
			files[c], files[k] = ext.CertPEM, ext.KeyPEM
		}
		got, err := FromFiles(files)
		if err != nil {
			t.Fatalf("FromFiles: %v", err)
		}
		if diff := cmp.Diff(s, got); diff != "" {
			t.Errorf("FromFiles with the external etcd's files (-want +got):\n%s", diff)
		}
	})

	t.Run("certificate without its key is kept for Ensure to reissue", func(t *testing.T) {
		files := Files(s)
		_, k := NodePath(KubeAdminCertName)
		delete(files, k)
		got, err := FromFiles(files)
		if err != nil {
			t.Fatalf("FromFiles: %v", err)
		}
		_, changes := mustEnsure(t, got, threeNodes(), t0)
		want := []Change{{Name: KubeAdminCertName, Action: ActionReissue, Reason: "unreadable: no private key"}}
		if diff := cmp.Diff(want, changes); diff != "" {
			t.Errorf("changes (-want +got):\n%s", diff)
		}
	})

	errTests := []struct {
		name    string
		edit    func(files map[string][]byte)
		wantErr string
	}{
		{"no CA", func(f map[string][]byte) {
			c, k := NodePath(CACertName)
			delete(f, c)
			delete(f, k)
		}, "no kube-ca.pem"},
		{"key without certificate", func(f map[string][]byte) {
			c, _ := NodePath(CACertName)
			delete(f, c)
		}, "kube-ca-key.pem has no kube-ca.pem beside it"},
		{"leaf of another CA", func(f map[string][]byte) {
			c, k := NodePath(KubeAPICertName)
			f[c], f[k] = other.Certs[KubeAPICertName].CertPEM, other.Certs[KubeAPICertName].KeyPEM
		}, "kube-apiserver: not signed by kube-ca"},
		{"proxy client of another requestheader CA", func(f map[string][]byte) {
			c, k := NodePath(APIProxyClientCertName)
			f[c], f[k] = other.Certs[APIProxyClientCertName].CertPEM, other.Certs[APIProxyClientCertName].KeyPEM
		}, "kube-apiserver-proxy-client: not signed by kube-apiserver-requestheader-ca"},
		{"key of another certificate", func(f map[string][]byte) {
			_, k := NodePath(KubeProxyCertName)
			f[k] = s.Certs[KubeNodeCertName].KeyPEM
		}, "read kube-proxy: private key does not match the certificate"},
		{"service-account key mismatched", func(f map[string][]byte) {
			c, _ := NodePath(ServiceAccountTokenKeyName)
			f[c] = other.Certs[ServiceAccountTokenKeyName].CertPEM
		}, "kube-service-account-token: public key does not match the private key"},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			files := Files(s)
			tt.edit(files)
			got, err := FromFiles(files)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if got != nil {
				t.Error("FromFiles returned a set with its error")
			}
			if strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("error holds PEM material: %v", err)
			}
		})
	}
}

func save(t *testing.T, dir string, s *Set) {
	t.Helper()
	if err := Save(dir, s); err != nil {
		t.Fatalf("Save: %v", err)
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
