package spec

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	yaml "go.yaml.in/yaml/v3"

	"github.com/rigger/rigger/internal/golden"
	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// checkGolden compares got with the file at path (golden.Check).
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	golden.Check(t, path, []byte(got))
}

// TestInvalidFixtures checks the diagnostics of every file in
// testdata/invalid against its .golden file.
func TestInvalidFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yml"), func(t *testing.T) {
			_, diags, err := Load(f)
			if err == nil {
				t.Errorf("Load(%s) returned no error", f)
			}
			var b strings.Builder
			for _, d := range diags {
				b.WriteString(d.String())
				b.WriteString("\n")
			}
			checkGolden(t, strings.TrimSuffix(f, ".yml")+".golden", b.String())
		})
	}
}

func TestThreeMistakesAllReported(t *testing.T) {
	_, diags, _ := Load("testdata/invalid/three-mistakes.yml")
	want := []struct {
		line int
		path string
	}{
		{8, "nodes[1].role[0]"},
		{9, "nodes[2].address"},
		{14, "services.kube-api.extra-args"},
	}
	if len(diags) != len(want) {
		t.Fatalf("got %d diagnostics, want %d:\n%v", len(diags), len(want), diags)
	}
	for i, w := range want {
		if diags[i].Line != w.line || diags[i].Path != w.path || diags[i].Severity != SeverityError {
			t.Errorf("diagnostic %d = %s, want an error at line %d, path %s", i, diags[i], w.line, w.path)
		}
	}
}

func TestExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob("../examples/clusters/*/cluster.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"single-node", "ha", "three-role", "bastion", "s3-backups", "extra-args", "private-registry", "labels-taints", "sandbox"} {
		if !contains(files, "../examples/clusters/"+name+"/cluster.yml") {
			t.Errorf("examples/clusters/%s/cluster.yml is missing", name)
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f)), func(t *testing.T) {
			c, diags, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diags {
				t.Errorf("unexpected %s", d)
			}
			if len(c.Nodes) == 0 {
				t.Error("no nodes")
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestDefaults(t *testing.T) {
	c, diags := Parse([]byte(`
nodes:
  - address: Node-A.Example.com
    user: rke
    role: [etcd, controlplane, worker]
  - address: 10.0.0.2
    internal_address: 192.168.0.2
    hostname_override: two
    port: 2222
    user: rke
    role: [worker]
    ssh_key: inline
services:
  kube-api:
    service_cluster_ip_range: 10.96.0.0/12
  kubelet:
    cluster_dns_server: 10.96.0.10
`), "cluster.yml")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"cluster_name", c.ClusterName, "local"},
		{"hostname_override is the lower-cased address", c.Nodes[0].HostnameOverride, "node-a.example.com"},
		{"internal_address is the address", c.Nodes[0].InternalAddress, "Node-A.Example.com"},
		{"explicit internal_address kept", c.Nodes[1].InternalAddress, "192.168.0.2"},
		{"port", c.Nodes[0].Port, "22"},
		{"port given as a number", c.Nodes[1].Port, "2222"},
		{"docker_socket", c.Nodes[0].DockerSocket, "/var/run/docker.sock"},
		{"ssh_key_path", c.Nodes[0].SSHKeyPath, "~/.ssh/id_rsa"},
		{"no ssh_key_path beside an inline key", c.Nodes[1].SSHKeyPath, ""},
		{"transport", c.Nodes[0].Transport, "ssh"},
		{"kube-controller inherits the service range", c.Services.KubeController.ServiceClusterIPRange, "10.96.0.0/12"},
		{"cluster_cidr", c.Services.KubeController.ClusterCIDR, "10.42.0.0/16"},
		{"cluster_domain", c.Services.Kubelet.ClusterDomain, "cluster.local"},
		{"node port range", c.Services.KubeAPI.ServiceNodePortRange, "30000-32767"},
		{"interval_hours", c.Services.Etcd.BackupConfig.IntervalHours, 12},
		{"retention", c.Services.Etcd.BackupConfig.Retention, 6},
		{"backups enabled", *c.Services.Etcd.BackupConfig.Enabled, true},
		{"max_unavailable_worker", c.UpgradeStrategy.MaxUnavailableWorker, "10%"},
		{"max_unavailable_controlplane", c.UpgradeStrategy.MaxUnavailableControlplane, "1"},
		{"drain", *c.UpgradeStrategy.Drain, false},
		{"ignore_daemonsets", *c.UpgradeStrategy.DrainInput.IgnoreDaemonSets, true},
		{"grace_period", c.UpgradeStrategy.DrainInput.GracePeriod, -1},
		{"drain timeout", c.UpgradeStrategy.DrainInput.Timeout, 120},
		{"network plugin", c.Network.Plugin, "canal"},
		{"authentication", c.Authentication.Strategy, "x509"},
		{"authorization", c.Authorization.Mode, "rbac"},
		{"kubernetes_version", c.KubernetesVersion, DefaultKubernetesVersion},
		{"kubernetes_version is RKE v1.8.14's default", c.KubernetesVersion, "v1.32.13-rancher1-3"},
		{"kubernetes image from the version", c.SystemImages.Kubernetes, "rke-extended-life/hyperkube:v1.32.13-rancher1"},
		{"etcd image from the version", c.SystemImages.Etcd, "rancher/mirrored-coreos-etcd:v3.5.16"},
		{"rke-tools from the version", c.SystemImages.Alpine, "rancher/rke-tools:v0.1.114"},
		{"component image from system_images", c.Services.KubeAPI.Image, "rke-extended-life/hyperkube:v1.32.13-rancher1"},
		{"cri-dockerd from 1.24 on", *c.EnableCRIDockerd, true},
		{"ingress network mode from 1.21 on", c.Ingress.NetworkMode, "hostPort"},
		{"etcd image", c.Services.Etcd.Image, c.SystemImages.Etcd},
		{"host key policy", c.Rigger.SSH.HostKeyPolicy, "strict"},
		{"connect timeout", c.Rigger.SSH.ConnectTimeout.Std(), DefaultConnectTimeout},
		{"max_parallel", c.Rigger.MaxParallel, 10},
		{"max_removed_nodes", c.Rigger.MaxRemovedNodes, "30%"},
		{"add-ons are pruned", *c.Rigger.Addons.Prune, true},
	}
	for _, ch := range checks {
		if diff := cmp.Diff(ch.want, ch.got); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", ch.name, diff)
		}
	}
}

func TestUserValuesWinOverDefaults(t *testing.T) {
	c, diags := Parse([]byte(`
kubernetes_version: v1.31.5-rancher1-1
nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]
system_images:
  kubernetes: registry.internal/hyperkube:v1.31.5
services:
  etcd:
    extra_args: {election-timeout: "10000"}
  scheduler:
    image: registry.internal/scheduler:custom
upgrade_strategy:
  max_unavailable_worker: 3
  drain: true
rigger:
  addons: {prune: false}
`), "cluster.yml")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if got := c.Services.Etcd.ExtraArgs["election-timeout"]; got != "10000" {
		t.Errorf("election-timeout = %q, want the user's 10000", got)
	}
	if got := c.Services.Etcd.ExtraArgs["heartbeat-interval"]; got != "500" {
		t.Errorf("heartbeat-interval = %q, want the default 500", got)
	}
	if got := c.Services.KubeAPI.Image; got != "registry.internal/hyperkube:v1.31.5" {
		t.Errorf("kube-api image = %q, want system_images.kubernetes", got)
	}
	if got := c.Services.Scheduler.Image; got != "registry.internal/hyperkube:v1.31.5" {
		t.Errorf("scheduler image = %q, want system_images.kubernetes, which replaces the service's own as in RKE", got)
	}
	if len(diags) != 1 || diags[0].Path != "services.scheduler.image" || diags[0].Severity != SeverityWarning {
		t.Errorf("want one warning for services.scheduler.image, got %v", diags)
	}
	if got := c.SystemImages.Etcd; got != "rancher/mirrored-coreos-etcd:v3.5.15" {
		t.Errorf("etcd image = %q, want RKE's of v1.31.5-rancher1-1", got)
	}
	if c.UpgradeStrategy.MaxUnavailableWorker != "3" || !*c.UpgradeStrategy.Drain {
		t.Errorf("upgrade_strategy = %+v", c.UpgradeStrategy)
	}
	if *c.Rigger.Addons.Prune {
		t.Error("rigger.addons.prune: false was read as true")
	}
}

// TestVersionTable checks the images of the version table against RKE's
// rules: exact version keys only, keys the user set kept, the default
// registry's prefix on the table's images.
func TestVersionTable(t *testing.T) {
	parse := func(t *testing.T, yml string) *Cluster {
		t.Helper()
		c, diags := Parse([]byte("nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\n"+yml), "cluster.yml")
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		return c
	}
	t.Run("every image of RKE's table and rigger's", func(t *testing.T) {
		for _, v := range KubernetesVersions() {
			yml := "kubernetes_version: " + v + "\n"
			want, _ := KnownImages(v)
			if riggermeta.IsRigger(v) {
				// ingress-nginx is retired; some have no kubernetes image.
				yml += "ingress: {provider: none}\n"
				if want.Kubernetes == "" {
					want.Kubernetes = "registry.example.com/hyperkube:mine"
					yml += "system_images: {kubernetes: " + want.Kubernetes + "}\n"
				}
			}
			c := parse(t, yml)
			if diff := cmp.Diff(want, c.SystemImages); diff != "" {
				t.Errorf("%s: (-table +cluster)\n%s", v, diff)
			}
		}
	})
	t.Run("every RKE image key has a system_images key", func(t *testing.T) {
		rt, st := reflect.TypeFor[rkemeta.SystemImages](), reflect.TypeFor[SystemImages]()
		for i := range rt.NumField() {
			if _, ok := st.FieldByName(rt.Field(i).Name); !ok {
				t.Errorf("RKE's image %s has no field in SystemImages", rt.Field(i).Name)
			}
		}
		im, _ := rkemeta.Images(DefaultKubernetesVersion)
		known, _ := KnownImages(DefaultKubernetesVersion)
		rv, sv := reflect.ValueOf(im), reflect.ValueOf(known)
		for i := range rt.NumField() {
			if got := sv.FieldByName(rt.Field(i).Name).String(); got != rv.Field(i).String() {
				t.Errorf("%s = %q, RKE says %q", rt.Field(i).Name, got, rv.Field(i).String())
			}
		}
	})
	t.Run("the default registry prefixes the table's images only", func(t *testing.T) {
		c := parse(t, `kubernetes_version: v1.30.11-rancher1-1
system_images: {etcd: mine/etcd:v3.5.16}
private_registries:
  - {url: other.example}
  - {url: registry.internal:5000, is_default: true}
`)
		if c.SystemImages.Etcd != "mine/etcd:v3.5.16" {
			t.Errorf("etcd = %s, want the user's", c.SystemImages.Etcd)
		}
		if want := "registry.internal:5000/rancher/hyperkube:v1.30.11-rancher1"; c.SystemImages.Kubernetes != want {
			t.Errorf("kubernetes = %s, want %s", c.SystemImages.Kubernetes, want)
		}
	})
}

func TestMergeKeysAndAnchors(t *testing.T) {
	c, diags := Parse([]byte(`
x-node: &node
  user: rke
  role: [etcd, controlplane, worker]
`+"\n"), "cluster.yml")
	if !diags.HasErrors() || diags[0].Path != "x-node" {
		t.Fatalf("an unknown top-level key holding anchors must be reported, got %v", diags)
	}
	_ = c
	c, diags = Parse([]byte(`
nodes:
  - &first {address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker], labels: {zone: a}}
  - <<: *first
    address: 10.0.0.2
  - <<: [*first]
    address: 10.0.0.3
    user: admin
`), "cluster.yml")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if len(c.Nodes) != 3 || c.Nodes[1].User != "rke" || c.Nodes[1].Address != "10.0.0.2" || c.Nodes[2].User != "admin" || c.Nodes[2].Labels["zone"] != "a" {
		t.Errorf("merge keys resolved wrongly: %+v", c.Nodes)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	files, err := filepath.Glob("../examples/clusters/*/cluster.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example cluster.yml to round-trip (%v): a test of nothing passes whatever Marshal does", err)
	}
	for _, f := range files {
		c, _, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Marshal(c, true)
		if err != nil {
			t.Fatal(err)
		}
		again, diags := Parse(out, "defaults.yml")
		if diags.HasErrors() {
			t.Fatalf("%s: the defaulted output does not load:\n%v\n%s", f, diags, out)
		}
		if diff := cmp.Diff(c, again); diff != "" {
			t.Errorf("%s: defaults are not a fixed point (-first +second):\n%s", f, diff)
		}
	}
}

func TestMarshalRedactsSecrets(t *testing.T) {
	c, _, err := Load("../examples/clusters/s3-backups/cluster.yml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Marshal(c, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"AKIAEXAMPLEEXAMPLE", "example-secret-key-change-me"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("output holds the secret %q", secret)
		}
	}
	if !strings.Contains(string(out), "secret_key: "+Redacted) {
		t.Errorf("secret_key is not shown as %s:\n%s", Redacted, out)
	}
}

// TestMarshalRedactsEverySecret: what the schema marks secret (the keys of
// secrets_encryption_config.custom_config, the webhook's kubeconfig, the
// values of extra_env) and a URL's password anywhere are shown only with
// showSecrets.
func TestMarshalRedactsEverySecret(t *testing.T) {
	const yml = `cluster_name: c
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}
services:
  kube-api:
    extra_env: ["HTTPS_PROXY=http://proxyuser:pr0xyPass@proxy:3128", "PLAIN=envValue1"]
    extra_args: {oidc-issuer-url: "https://issuer:argPass@example.com"}
    secrets_encryption_config:
      enabled: true
      custom_config:
        apiVersion: apiserver.config.k8s.io/v1
        kind: EncryptionConfiguration
        resources:
          - resources: [secrets]
            providers:
              - aescbc:
                  keys:
                    - name: k1
                      secret: c2VjcmV0LWtleS0zMi1ieXRlcy1sb25nLWFhYWFhYWE=
              - identity: {}
authentication:
  strategy: x509|webhook
  webhook:
    config_file: |
      apiVersion: v1
      kind: Config
      users: [{name: w, user: {token: webhookT0ken}}]
`
	c, diags := Parse([]byte(yml), "cluster.yml")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	secrets := []string{"c2VjcmV0LWtleS0zMi1ieXRlcy1sb25nLWFhYWFhYWE=", "webhookT0ken", "pr0xyPass", "envValue1", "argPass"}
	out, err := Marshal(c, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if strings.Contains(string(out), s) {
			t.Errorf("output holds the secret %q:\n%s", s, out)
		}
	}
	for _, want := range []string{"HTTPS_PROXY=" + Redacted, "PLAIN=" + Redacted, "custom_config: " + Redacted,
		"config_file: " + Redacted, "https://issuer:" + Redacted + "@example.com"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	shown, err := Marshal(c, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets {
		if !strings.Contains(string(shown), s) {
			t.Errorf("showSecrets: output lacks %q:\n%s", s, shown)
		}
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"extra_args", "extra_binds", "extra_env", "image", "cluster_dns_server", "kube-api"}
	for _, tc := range []struct{ in, want string }{
		{"extra-args", "extra_args"},
		{"extraArgs", "extra_args"},
		{"extra_arg", "extra_args"},
		{"imgae", "image"},
		{"cluster_dns", "cluster_dns_server"},
		{"kubeapi", "kube-api"},
		{"completely_unrelated", ""},
		{"x", ""},
	} {
		if got := suggest(tc.in, known); got != tc.want {
			t.Errorf("suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseBudget(t *testing.T) {
	for _, tc := range []struct {
		in           string
		least, total int
		want         int
		wantErr      bool
	}{
		{"10%", 1, 25, 2, false},
		{"10%", 1, 5, 1, false}, // rounds down, but at least 1
		{"3", 1, 25, 3, false},
		{"100%", 1, 7, 7, false},
		{"0", 0, 10, 0, false},
		{"0", 1, 10, 0, true},
		{"0%", 1, 10, 0, true},
		{"101%", 1, 10, 0, true},
		{"-1", 1, 10, 0, true},
		{"ten", 1, 10, 0, true},
		{"", 1, 10, 0, true},
	} {
		b, err := ParseBudget(tc.in, tc.least)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseBudget(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil {
			if got := b.Of(tc.total, tc.least); got != tc.want {
				t.Errorf("ParseBudget(%q).Of(%d) = %d, want %d", tc.in, tc.total, got, tc.want)
			}
		}
	}
}

// FuzzLoad feeds arbitrary bytes to the loader: it must never panic, its
// diagnostics stay within their bounds, the weight of the YAML structure
// is at least the number of values the YAML parser builds (so that the
// bound checked before parsing bounds its memory), and whatever loads
// without errors must survive a round trip through Marshal. The seeds of
// testdata/fuzz/FuzzLoad, run by every `go test`, are files made to cost
// time or memory (aliases inside themselves, billion laughs, nesting
// without end, long keys): without the bounds, they take minutes and
// gigabytes.
func FuzzLoad(f *testing.F) {
	for _, glob := range []string{"testdata/invalid/*.yml", "../examples/clusters/*/cluster.yml"} {
		files, _ := filepath.Glob(glob)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, diags := Parse(data, "fuzz.yml")
		if len(diags) > maxDiagnostics+2 {
			t.Fatalf("%d diagnostics, more than %d", len(diags), maxDiagnostics+2)
		}
		for _, d := range diags {
			if len(d.Path) > maxPath+maxKey+8 || len(d.Summary) > maxText+3 || len(d.Detail) > maxText+3 {
				t.Fatalf("a diagnostic of %d bytes (path %d, summary %d, detail %d) is not shortened", len(d.String()), len(d.Path), len(d.Summary), len(d.Detail))
			}
		}
		if root, err := parseYAML(bytes.NewReader(data)); err == nil && root != nil {
			if weight, _ := structure(data, math.MaxInt); countNodes(root)+1 > weight+2 {
				t.Fatalf("the YAML parser built %d values, more than the weight %d of the structure (+2)", countNodes(root)+1, weight)
			}
		}
		if diags.HasErrors() {
			return
		}
		out, err := Marshal(c, true)
		if err != nil {
			t.Fatalf("marshal of a valid cluster: %v", err)
		}
		if _, diags := Parse(out, "again.yml"); diags.HasErrors() {
			t.Fatalf("a valid cluster does not load again after Marshal:\n%v\n%s", diags, out)
		}
	})
}

// countNodes counts the nodes of the tree at n, aliases not followed.
func countNodes(n *yaml.Node) int {
	count := 1
	for _, c := range n.Content {
		count += countNodes(c)
	}
	return count
}

// TestCloudProvidersWithoutConfig: the names RKE runs without a config
// block are accepted at validate; the in-tree aws only before 1.27.
func TestCloudProvidersWithoutConfig(t *testing.T) {
	for _, tc := range []struct {
		name, version string
		ok            bool
	}{
		{"external", DefaultKubernetesVersion, true},
		{"external-aws", DefaultKubernetesVersion, true},
		{"aws", "v1.26.15-rancher1-1", true},
		{"aws", "v1.27.6-rancher1-1", false},
		{"azure", DefaultKubernetesVersion, false},
		{"gce", DefaultKubernetesVersion, false},
	} {
		yml := "kubernetes_version: " + tc.version + "\nnodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\ncloud_provider: {name: " + tc.name + "}\n"
		_, diags := Parse([]byte(yml), "cluster.yml")
		if diags.HasErrors() == tc.ok {
			t.Errorf("cloud_provider.name %s on %s: errors %v, want accepted %v", tc.name, tc.version, diags, tc.ok)
		}
	}
}

// TestSecretsEncryption: a key rigger generates is accepted, and so is
// its rotation; rotating without encryption, or a custom_config's key, is
// refused as RKE refuses it.
func TestSecretsEncryption(t *testing.T) {
	const custom = "{apiVersion: apiserver.config.k8s.io/v1, kind: EncryptionConfiguration, resources: [{resources: [secrets], providers: [{identity: {}}]}]}"
	for _, tc := range []struct {
		name, yml, refused string
	}{
		{"generated key", "services: {kube-api: {secrets_encryption_config: {enabled: true}}}", ""},
		{"rotate the generated key", "rotate_encryption_key: true\nservices: {kube-api: {secrets_encryption_config: {enabled: true}}}", ""},
		{"custom config", "services: {kube-api: {secrets_encryption_config: {enabled: true, custom_config: " + custom + "}}}", ""},
		{"rotate without encryption", "rotate_encryption_key: true", "there is no key to rotate"},
		{"rotate when disabled", "rotate_encryption_key: true\nservices: {kube-api: {secrets_encryption_config: {enabled: false}}}", "there is no key to rotate"},
		{"rotate a custom config", "rotate_encryption_key: true\nservices: {kube-api: {secrets_encryption_config: {enabled: true, custom_config: " + custom + "}}}", "only the key it generates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yml := "nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\n" + tc.yml + "\n"
			_, diags := Parse([]byte(yml), "cluster.yml")
			switch {
			case tc.refused == "" && diags.HasErrors():
				t.Fatalf("refused: %v", diags)
			case tc.refused != "" && !strings.Contains(fmt.Sprint(diags), tc.refused):
				t.Fatalf("diagnostics %v, want %q", diags, tc.refused)
			}
		})
	}
}

// TestMarshalRedactsAddonSecrets: config defaults shows addons, but not
// the data of a Secret among them (nor of a List's Secret); the rest of
// the manifests is shown.
func TestMarshalRedactsAddonSecrets(t *testing.T) {
	y := "nodes:\n  - {address: 10.0.0.1, user: root, role: [etcd, controlplane, worker]}\n" +
		"addons: |-\n" +
		"  apiVersion: v1\n  kind: Secret\n  metadata: {name: db}\n  data: {password: c3VwZXJzZWNyZXQ=}\n  stringData: {token: hunter2}\n" +
		"  ---\n" +
		"  apiVersion: v1\n  kind: List\n  items:\n  - {apiVersion: v1, kind: Secret, metadata: {name: b}, stringData: {k: listsecret}}\n" +
		"  ---\n" +
		"  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: shown}\n  data: {greeting: hello}\n"
	c, diags := Parse([]byte(y), "cluster.yml")
	if diags.Err() != nil {
		t.Fatal(diags.Err())
	}
	out, err := Marshal(c, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"c3VwZXJzZWNyZXQ=", "hunter2", "listsecret"} {
		if strings.Contains(string(out), secret) {
			t.Errorf("output holds the Secret's value %q:\n%s", secret, out)
		}
	}
	for _, shown := range []string{"password:", "greeting: hello", "name: db"} {
		if !strings.Contains(string(out), shown) {
			t.Errorf("output lacks %q:\n%s", shown, out)
		}
	}
	if all, _ := Marshal(c, true); !strings.Contains(string(all), "hunter2") {
		t.Errorf("with showSecrets the addons are not shown whole:\n%s", all)
	}
}

// TestLegacySchedule: with backup_config null or absent, creation and
// retention make the schedule as in RKE (a snapshot every creation, kept
// for retention), in rigger's whole hours and number of snapshots.
func TestLegacySchedule(t *testing.T) {
	for _, tc := range []struct {
		creation, retention string
		interval, keep      int
	}{
		{"", "", 12, 6},
		{"6h", "24h", 6, 4},
		{"12h", "", 12, 6},
		{"", "36h", 12, 3},
		{"6h", "25h", 6, 5},
		{"90m", "6h", 2, 3},
		{"30m", "1h", 1, 1},
		{"1h", "10m", 1, 1},
		{"nonsense", "-5h", 12, 6},
	} {
		b := legacySchedule(tc.creation, tc.retention)
		if b.IntervalHours != tc.interval || b.Retention != tc.keep {
			t.Errorf("creation %q, retention %q: every %d h, %d kept; want %d h, %d", tc.creation, tc.retention, b.IntervalHours, b.Retention, tc.interval, tc.keep)
		}
	}
	_, diags := Parse([]byte(oneNode+"services: {etcd: {creation: 90m, retention: 6h}}\n"), "cluster.yml")
	if len(diags) != 1 || diags[0].Path != "services.etcd.creation" || diags[0].Severity != SeverityWarning {
		t.Errorf("creation 90m: want one warning, got %v", diags)
	}
}
