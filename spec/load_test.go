package spec

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with the file at path, or writes it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./spec -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; go test ./spec -update rewrites it):\n%s", path, diff)
	}
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
			golden(t, strings.TrimSuffix(f, ".yml")+".golden", b.String())
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
		{"kubernetes image from the version", c.SystemImages.Kubernetes, "rancher/hyperkube:v1.31.5-rancher1"},
		{"component image from system_images", c.Services.KubeAPI.Image, "rancher/hyperkube:v1.31.5-rancher1"},
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
kubernetes_version: v1.31.5
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
	if got := c.Services.Scheduler.Image; got != "registry.internal/scheduler:custom" {
		t.Errorf("scheduler image = %q, want the service's own", got)
	}
	if got := c.SystemImages.Etcd; got != "rancher/mirrored-coreos-etcd:v3.5.16" {
		t.Errorf("etcd image = %q: upstream's spelling v1.31.5 should find RKE's v1.31.5-rancher1-1 images", got)
	}
	if c.UpgradeStrategy.MaxUnavailableWorker != "3" || !*c.UpgradeStrategy.Drain {
		t.Errorf("upgrade_strategy = %+v", c.UpgradeStrategy)
	}
	if *c.Rigger.Addons.Prune {
		t.Error("rigger.addons.prune: false was read as true")
	}
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
	files, _ := filepath.Glob("../examples/clusters/*/cluster.yml")
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

// FuzzLoad feeds arbitrary bytes to the loader: it must never panic, and
// whatever loads without errors must survive a round trip through Marshal.
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
