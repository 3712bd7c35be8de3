package decide

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/nodebin"
	"github.com/rigger/rigger/spec"
)

// TestCheckSpec: what validation accepts, the plan builds, and what the
// plan would refuse of cluster.yml alone CheckSpec refuses, before any
// connection.
func TestCheckSpec(t *testing.T) {
	const nodes = "nodes:\n- {address: 10.0.0.1, user: rke, role: [etcd, controlplane]}\n- {address: 10.0.0.2, user: rke, role: [worker]}\n"
	for _, tc := range []struct {
		name, yml string
		want      string // substring of the one error; "" for none
	}{
		{name: "RKE's defaults"},
		{name: "cloud provider external", yml: "cloud_provider: {name: external}"},
		{name: "cloud provider external-aws", yml: "cloud_provider: {name: external-aws}"},
		{name: "in-tree aws before 1.27", yml: "kubernetes_version: v1.26.15-rancher1-1\ncloud_provider: {name: aws}"},
		{name: "custom cloud config", yml: "kubernetes_version: v1.25.16-rancher2-3\ncloud_provider: {name: openstack, customCloudProvider: \"[Global]\\n\"}"},
		{name: "own encryption config", yml: "services: {kube-api: {secrets_encryption_config: {enabled: true, custom_config: {apiVersion: apiserver.config.k8s.io/v1, kind: EncryptionConfiguration, resources: [{resources: [secrets], providers: [{identity: {}}]}]}}}}"},
		{name: "calico on aws", yml: "network: {plugin: calico, calico_network_provider: {cloudprovider: aws}}"},
		{name: "weave before 1.30", yml: "kubernetes_version: v1.29.15-rancher1-1\nnetwork: {plugin: weave}"},
		{name: "inline add-on", yml: "addons: |\n  apiVersion: v1\n  kind: Namespace\n  metadata: {name: a}"},
		{name: "aci", yml: "network: {plugin: aci}", want: "rigger does not deploy the Cisco ACI CNI yet"},
		{name: "flannel VNI not a number", yml: "network: {plugin: flannel, options: {flannel_backend_vni: 4k}}", want: "network.options.flannel_backend_vni"},
		{name: "inline add-on that is not YAML", yml: "addons: \"kind: [\"", want: "addons"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, diags := spec.Parse([]byte(nodes+tc.yml+"\n"), "cluster.yml")
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			var got spec.Diagnostics
			for _, d := range CheckSpec(c, "cluster.yml") {
				if d.Severity == spec.SeverityError {
					got = append(got, d)
				}
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("refused: %v", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0].Summary, tc.want) || got[0].File != "cluster.yml" || got[0].Severity != spec.SeverityError):
				t.Errorf("got %v, want one error with %q", got, tc.want)
			}
		})
	}
}

// TestCheckSpecExamples: every example cluster passes CheckSpec, as `make
// demo` validates them.
func TestCheckSpecExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/clusters/*/cluster.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		c, _, err := spec.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckSpec(c, f).Err(); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// TestCheckSpecSnapshotImage: the scheduled snapshots cluster.yml asks of
// the etcd nodes (RKE's default), which run rigger's own binary when no
// image of rigger's is given, get a warning naming rigger.image when that
// binary cannot run on a node (here a dynamically linked one), and only
// then.
func TestCheckSpecSnapshotImage(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	nodebin.Use(sh)
	t.Cleanup(func() { nodebin.Use("") })
	const nodes = "nodes:\n- {address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}\n"
	for _, tc := range []struct {
		name, yml string
		warn      bool
	}{
		{name: "RKE's defaults", warn: true},
		{name: "rigger.image", yml: "rigger: {image: registry.example/rigger/rigger:v1.0.0}"},
		{name: "cert_downloader is rigger's", yml: "system_images: {cert_downloader: rigger/rigger:dev}"},
		{name: "cert_downloader is rke-tools", yml: "system_images: {cert_downloader: registry.example/rancher/rke-tools:v0.1.111}", warn: true},
		{name: "snapshot false", yml: "services: {etcd: {snapshot: false}}"},
		{name: "backups disabled", yml: "services: {etcd: {backup_config: {enabled: false}}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, diags := spec.Parse([]byte(nodes+tc.yml+"\n"), "cluster.yml")
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			got := CheckSpec(c, "cluster.yml")
			warned := len(got) == 1 && got[0].Severity == spec.SeverityWarning && got[0].Path == "rigger.image" &&
				strings.Contains(got[0].Summary, "dynamically linked")
			if warned != tc.warn || !tc.warn && len(got) > 0 {
				t.Errorf("got %v, want a rigger.image warning: %v", got, tc.warn)
			}
		})
	}
}

// TestCheckSpecLargeFileMemory: validating a large valid cluster.yml (an
// inline add-on of 4 MB, within spec.MaxFileSize) allocates a bounded
// multiple of its size: about 20 times, as the YAML libraries copy a long
// text a few times over (yaml.v3 reads a block scalar by appending to it,
// then spec and the add-on decoder each turn it to JSON and decode that).
// Before, 372 MB for a 5.6 MB file (with the 52 MB of add-on templates).
func TestCheckSpecLargeFileMemory(t *testing.T) {
	var b strings.Builder
	b.WriteString("nodes:\n- {address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}\nservices: {etcd: {snapshot: false}}\n")
	b.WriteString("addons: |-\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: big, namespace: default}\n  data:\n")
	for i := 0; b.Len() < 4<<20; i++ {
		fmt.Fprintf(&b, "    key%d: %s\n", i, strings.Repeat("x", 1000))
	}
	yml := []byte(b.String())
	// The add-on templates are read once per process (10 MB); that is
	// spec/rkemeta's to bound.
	small, diags := spec.Parse([]byte("nodes:\n- {address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}\n"), "cluster.yml")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	CheckSpec(small, "cluster.yml")

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, diags := spec.Parse(yml, "cluster.yml")
	if !diags.HasErrors() {
		diags = append(diags, CheckSpec(c, "cluster.yml")...)
	}
	runtime.ReadMemStats(&after)
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	n := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes of cluster.yml: %d bytes allocated (%.1f times)", len(yml), n, float64(n)/float64(len(yml)))
	if limit := uint64(24 * len(yml)); n > limit {
		t.Errorf("validating %d bytes of cluster.yml allocated %d bytes, more than 24 times its size", len(yml), n)
	}
}
