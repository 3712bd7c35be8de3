package desired

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/rigger/rigger/internal/golden"
	"github.com/rigger/rigger/spec"
)

// loadFile returns the defaulted cluster of a cluster.yml.
func loadFile(t testing.TB, path string) *spec.Cluster {
	t.Helper()
	c, diags, err := spec.Load(path)
	if err != nil {
		t.Fatalf("load %s: %v\n%v", path, err, diags)
	}
	return c
}

// configFiles returns ConfigFiles of the node with the given address.
func configFiles(t testing.TB, c *spec.Cluster, address string) map[string][]byte {
	t.Helper()
	d := build(t, c)
	n, ok := d.Node(address)
	if !ok {
		t.Fatalf("no node %s", address)
	}
	files, err := ConfigFiles(c, n)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// renderFiles is files as people read them in the golden files: each
// path as a comment line, then its content.
func renderFiles(files map[string][]byte) []byte {
	var b bytes.Buffer
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		b.WriteString("### " + p + "\n")
		b.Write(files[p])
		if !bytes.HasSuffix(files[p], []byte("\n")) {
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

func TestConfigFilesGolden(t *testing.T) {
	for _, tc := range []struct{ name, cluster, node string }{
		// RKE's defaults: PodSecurity privileged, audit policy Metadata.
		{"config-files-default", filepath.Join("..", "..", "examples", "clusters", "ha", "cluster.yml"), "203.0.113.11"},
		// The user's objects, kept as written, and the plugins added to them.
		{"config-files-custom", filepath.Join("testdata", "config-files.yml"), "10.20.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden.Check(t, filepath.Join("testdata", tc.name+".golden"), renderFiles(configFiles(t, loadFile(t, tc.cluster), tc.node)))
		})
	}
}

// TestContainersFindTheirConfigFiles checks that every file under
// /etc/kubernetes a container names in a flag, other than certificates,
// keys and kubeconfigs (TestContainersFindTheirCertificates), is written
// by ConfigFiles to that node, unless the user set the flag in extra_args;
// and that ConfigFiles writes nothing no container reads.
func TestContainersFindTheirConfigFiles(t *testing.T) {
	clusters := map[string]string{
		"config-files.yml":  filepath.Join("testdata", "config-files.yml"),
		"external-etcd.yml": filepath.Join("testdata", "external-etcd.yml"),
	}
	examples, err := filepath.Glob(filepath.Join("..", "..", "examples", "clusters", "*", "cluster.yml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, e := range examples {
		clusters[filepath.Base(filepath.Dir(e))] = e
	}
	checked := 0
	for name, path := range clusters {
		c := loadFile(t, path)
		userFlags := map[string]bool{}
		for _, s := range []spec.BaseService{c.Services.KubeAPI.BaseService, c.Services.KubeController.BaseService, c.Services.Kubelet.BaseService} {
			for k := range s.ExtraArgs {
				userFlags[k] = true
			}
			for k := range s.ExtraArgsArray {
				userFlags[k] = true
			}
		}
		d := build(t, c)
		for i := range d.Nodes {
			n := &d.Nodes[i]
			files, err := ConfigFiles(c, n)
			if err != nil {
				t.Errorf("%s: %s: %v", name, n.Address, err)
				continue
			}
			read := map[string]bool{}
			for _, ctr := range n.Containers {
				for _, arg := range ctr.Args {
					flag, val, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
					if !strings.HasPrefix(val, KubernetesDir+"/") || userFlags[flag] {
						continue
					}
					if strings.HasSuffix(val, ".pem") || strings.HasPrefix(val, SSLDir+"kubecfg-") {
						read[val] = true
						continue // the PKI's (or an external etcd's: TestContainersFindTheirCertificates)
					}
					checked++
					read[val] = true
					if _, ok := files[val]; !ok {
						t.Errorf("%s: %s: %s --%s names %s, which ConfigFiles does not write", name, n.Address, ctr.Name, flag, val)
					}
				}
			}
			for p := range files {
				if !read[p] {
					t.Errorf("%s: %s: ConfigFiles writes %s, which no container reads", name, n.Address, p)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d config file paths checked: the containers no longer refer to %s as expected", checked, KubernetesDir)
	}
}

// TestConfigFilesOnlyControlplane: only controlplane nodes get
// configuration files, but for the etcd-rolling-snapshots container's.
func TestConfigFilesOnlyControlplane(t *testing.T) {
	c := load(t, "three-role")
	d := build(t, c)
	for i := range d.Nodes {
		n := &d.Nodes[i]
		files, err := ConfigFiles(c, n)
		if err != nil {
			t.Fatal(err)
		}
		delete(files, SnapshotterConfigFile)
		if cp := n.HasRole(spec.RoleControlPlane); cp != (len(files) > 0) {
			t.Errorf("%s (roles %v): %d files", n.Address, n.Roles, len(files))
		}
	}
}

func TestConfigFilesDeterministic(t *testing.T) {
	c := loadFile(t, filepath.Join("testdata", "config-files.yml"))
	first := renderFiles(configFiles(t, c, "10.20.0.1"))
	for range 20 {
		if got := renderFiles(configFiles(t, c, "10.20.0.1")); !bytes.Equal(got, first) {
			t.Fatalf("ConfigFiles gave different bytes for the same cluster:\n%s\n---\n%s", first, got)
		}
	}
}

// admission decodes the node's admission configuration.
func admission(t *testing.T, files map[string][]byte) map[string]any {
	t.Helper()
	b, ok := files[AdmissionConfigFile]
	if !ok {
		t.Fatalf("no %s", AdmissionConfigFile)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v\n%s", AdmissionConfigFile, err, b)
	}
	return m
}

func TestAdmissionConfiguration(t *testing.T) {
	const node = "203.0.113.11"
	for _, tc := range []struct {
		name   string
		change func(*spec.Cluster)
		want   string // the plugins section, as YAML
	}{
		{"privileged by default", func(*spec.Cluster) {}, `
plugins:
- configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    defaults: {enforce: privileged, enforce-version: latest}
    kind: PodSecurityConfiguration
  name: PodSecurity`},
		{"restricted", func(c *spec.Cluster) { c.Services.KubeAPI.PodSecurityConfiguration = "restricted" }, `
plugins:
- configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    defaults: {audit: restricted, audit-version: latest, enforce: restricted, enforce-version: latest, warn: restricted, warn-version: latest}
    exemptions: {namespaces: [ingress-nginx, kube-system]}
    kind: PodSecurityConfiguration
  name: PodSecurity`},
		{"v1beta1 before Kubernetes 1.25, by the version the image runs", func(c *spec.Cluster) {
			c.SystemImages.Kubernetes = "rancher/hyperkube:v1.24.17-rancher1"
		}, `
plugins:
- configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1beta1
    defaults: {enforce: privileged, enforce-version: latest}
    kind: PodSecurityConfiguration
  name: PodSecurity`},
		{"event rate limit, RKE's limits", func(c *spec.Cluster) { c.Services.KubeAPI.EventRateLimit = &spec.EventRateLimit{Enabled: true} }, `
plugins:
- configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    defaults: {enforce: privileged, enforce-version: latest}
    kind: PodSecurityConfiguration
  name: PodSecurity
- configuration:
    apiVersion: eventratelimit.admission.k8s.io/v1alpha1
    kind: Configuration
    limits: [{burst: 20000, qps: 5000, type: Server}]
  name: EventRateLimit`},
		{"user's configuration kept as written", func(c *spec.Cluster) {
			c.Services.KubeAPI.AdmissionConfiguration = spec.Object{
				"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
				"plugins": []any{map[string]any{"name": "PodSecurity", "path": "/etc/kubernetes/psa.yaml"}},
			}
			c.Services.KubeAPI.PodSecurityConfiguration = "restricted"
		}, `
plugins:
- {name: PodSecurity, path: /etc/kubernetes/psa.yaml}`},
		{"user's event rate limit plugin wins over event_rate_limit.configuration", func(c *spec.Cluster) {
			c.Services.KubeAPI.AdmissionConfiguration = spec.Object{
				"apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
				"plugins": []any{map[string]any{"name": "EventRateLimit", "path": "/etc/kubernetes/erl.yaml"}},
			}
			c.Services.KubeAPI.EventRateLimit = &spec.EventRateLimit{Enabled: true, Configuration: spec.Object{"kind": "Configuration"}}
		}, `
plugins:
- {name: EventRateLimit, path: /etc/kubernetes/erl.yaml}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, "ha")
			tc.change(c)
			got := admission(t, configFiles(t, c, node))
			var want map[string]any
			if err := yaml.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			want["apiVersion"], want["kind"] = "apiserver.config.k8s.io/v1", "AdmissionConfiguration"
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("admission configuration (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigFilesUserFlagsLeaveFilesOut(t *testing.T) {
	c := load(t, "ha")
	c.Services.KubeAPI.ExtraArgs = map[string]string{"audit-policy-file": "/etc/kubernetes/mine.yaml"}
	c.Services.KubeAPI.ExtraArgsArray = map[string][]string{"admission-control-config-file": {"/etc/kubernetes/admission.yaml"}}
	files := configFiles(t, c, "203.0.113.11")
	delete(files, SnapshotterConfigFile)
	if len(files) != 0 {
		t.Errorf("files %v, want none: the user set both flags", slices.Sorted(func(yield func(string) bool) {
			for p := range files {
				if !yield(p) {
					return
				}
			}
		}))
	}
}

func TestConfigFilesErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*spec.Cluster)
		want   []string
	}{
		{"cloud provider without a file", func(c *spec.Cluster) {
			c.CloudProvider = spec.CloudProvider{Name: "aws", AWSCloudProvider: &spec.AWSCloudProvider{}}
		}, []string{"cloud_provider aws", "customCloudProvider"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, "ha")
			tc.change(c)
			d := build(t, c)
			_, err := ConfigFiles(c, &d.Nodes[0])
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestConfigFilesCloudWithoutConfig: a cloud provider that needs no
// configuration gets an empty cloud config file on every node, as in RKE,
// and external-aws is passed as external.
func TestConfigFilesCloudWithoutConfig(t *testing.T) {
	for _, name := range []string{"external", "external-aws"} {
		c := load(t, "ha")
		c.CloudProvider = spec.CloudProvider{Name: name}
		d := build(t, c)
		for i := range d.Nodes {
			files, err := ConfigFiles(c, &d.Nodes[i])
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if b, ok := files[CloudConfigFile]; !ok || len(b) != 0 {
				t.Errorf("%s on %s: cloud config %q, %v; want an empty file", name, d.Nodes[i].Address, b, ok)
			}
		}
		kubelet := container(t, d, "203.0.113.11", Kubelet)
		if got := flagValues(kubelet.Args, "cloud-provider"); !slices.Equal(got, []string{"external"}) {
			t.Errorf("%s: kubelet --cloud-provider = %q, want external", name, got)
		}
	}
}

// TestGeneratedEncryption: rigger writes its own encryption configuration
// only when enabled without custom_config and without the user's file;
// ConfigFiles then leaves it to the caller (it holds a key of the state).
func TestGeneratedEncryption(t *testing.T) {
	custom := spec.Object{"apiVersion": "apiserver.config.k8s.io/v1", "kind": "EncryptionConfiguration"}
	for _, tc := range []struct {
		name     string
		enc      *spec.SecretsEncryptionConfig
		userFlag bool
		want     bool
		wantFile bool
	}{
		{"none", nil, false, false, false},
		{"disabled", &spec.SecretsEncryptionConfig{}, false, false, false},
		{"generated", &spec.SecretsEncryptionConfig{Enabled: true}, false, true, false},
		{"user's file", &spec.SecretsEncryptionConfig{Enabled: true}, true, false, false},
		{"custom_config", &spec.SecretsEncryptionConfig{Enabled: true, CustomConfig: custom}, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, "ha")
			c.Services.KubeAPI.SecretsEncryptionConfig = tc.enc
			if tc.userFlag {
				c.Services.KubeAPI.ExtraArgs = map[string]string{"encryption-provider-config": "/etc/kubernetes/mine.yaml"}
			}
			if got := GeneratedEncryption(c); got != tc.want {
				t.Fatalf("GeneratedEncryption = %v, want %v", got, tc.want)
			}
			files := configFiles(t, c, "203.0.113.11")
			if _, ok := files[EncryptionConfigFile]; ok != tc.wantFile {
				t.Fatalf("ConfigFiles writes %s: %v, want %v", EncryptionConfigFile, ok, tc.wantFile)
			}
		})
	}
}
