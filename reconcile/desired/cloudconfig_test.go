package desired

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/internal/rkerender"
	"github.com/rigger/rigger/spec"
)

// cloudCases are cluster.yml files with a typed cloud provider block, at a
// Kubernetes version that still has the in-tree provider.
var cloudCases = map[string]string{
	"azure": `kubernetes_version: v1.29.15-rancher1-1
cloud_provider:
  name: azure
  azureCloudProvider:
    cloud: AzurePublicCloud
    tenantId: t-1
    subscriptionId: s-1
    resourceGroup: rg
    location: westeurope
    aadClientId: id-1
    aadClientSecret: "se<cr>&t \"q\""
    cloudProviderBackoff: true
    cloudProviderBackoffRetries: 6
    useInstanceMetadata: true
    loadBalancerSku: standard
    excludeMasterFromStandardLB: false
`,
	"azure-minimal": `kubernetes_version: v1.24.17-rancher1-1
cloud_provider:
  name: azure
  azureCloudProvider:
    tenantId: t-2
`,
	"openstack": `kubernetes_version: v1.25.16-rancher2-3
cloud_provider:
  name: openstack
  openstackCloudProvider:
    global:
      auth-url: https://keystone.example:5000/v3
      username: rke
      password: "p#ss;word"
      tenant-id: tenant
      domain-name: Default
      region: RegionOne
    load_balancer:
      use-octavia: true
      subnet-id: sub-1
      monitor-max-retries: 3
      manage-security-groups: true
    block_storage:
      bs-version: v3
      ignore-volume-az: true
    metadata:
      request-timeout: 5
`,
	"openstack-minimal": `kubernetes_version: v1.24.17-rancher1-1
cloud_provider:
  name: openstack
  openstackCloudProvider:
    global: {auth-url: "https://k:5000/v3", password: "a` + "`" + `b"}
`,
	"vsphere": `kubernetes_version: v1.29.15-rancher1-1
cloud_provider:
  name: vsphere
  vsphereCloudProvider:
    global:
      user: admin@vsphere.local
      password: "p\"w"
      port: "443"
      insecure-flag: true
      datacenters: dc1
      soap-roundtrip-count: 3
    virtual_center:
      vc2.example: {user: u2, password: p2, datacenters: dc2}
      vc1.example: {user: u1, password: p1, port: "8443", soap-roundtrip-count: 1}
    workspace:
      server: vc1.example
      datacenter: dc1
      folder: kubernetes
      default-datastore: ds1
      resourcepool-path: /dc1/host/cluster/Resources
    disk: {scsicontrollertype: pvscsi}
    network: {public-network: VM Network}
`,
	"vsphere-minimal": `kubernetes_version: v1.28.15-rancher1-1
cloud_provider:
  name: vsphere
  vsphereCloudProvider:
    global: {user: u, password: p}
`,
}

const cloudNode = "nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\n"

// TestCloudConfigAgainstRKE: the cloud config file rigger writes from
// azureCloudProvider, openstackCloudProvider and vsphereCloudProvider is,
// byte for byte, the one RKE v1.8.14's own code makes of the same
// cluster.yml (its setCloudProvider, run by hack/rke-render -parse), and
// the components are pointed at it where RKE points them.
func TestCloudConfigAgainstRKE(t *testing.T) {
	bin := rkerender.Binary(t)
	in, out := t.TempDir(), t.TempDir()
	args := []string{"-parse", "-out", out}
	for name, yml := range cloudCases {
		f := filepath.Join(in, name+".yml")
		if err := os.WriteFile(f, []byte(cloudNode+yml), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, f)
	}
	rkerender.Run(t, bin, args...)
	for name, yml := range cloudCases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(out, name)
			for _, f := range []string{"error.txt", "init-error.txt"} {
				if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
					t.Fatalf("RKE refuses the file: %s", b)
				}
			}
			rke, err := os.ReadFile(filepath.Join(dir, "cloud-config"))
			if err != nil {
				t.Fatal(err)
			}
			c, diags := spec.Parse([]byte(cloudNode+yml), name+".yml")
			if diags.HasErrors() {
				t.Fatal(diags.Err())
			}
			files := configFiles(t, c, "10.0.0.1")
			if diff := cmp.Diff(string(rke), string(files[CloudConfigFile])); diff != "" {
				t.Errorf("%s (-RKE +rigger):\n%s", CloudConfigFile, diff)
			}
			d := build(t, c)
			n, _ := d.Node("10.0.0.1")
			for _, name := range []string{KubeAPIServer, KubeControllerManager, Kubelet} {
				ctr, ok := n.Container(name)
				if !ok {
					t.Fatalf("no %s", name)
				}
				args := strings.Join(ctr.Args, " ")
				if want := fmt.Sprintf("--cloud-provider=%s --cloud-config=/etc/kubernetes/cloud-config", c.CloudProvider.Name); !strings.Contains(args, "--cloud-config=/etc/kubernetes/cloud-config") ||
					!strings.Contains(args, "--cloud-provider="+c.CloudProvider.Name) {
					t.Errorf("%s's flags %s, want %s", name, args, want)
				}
			}
		})
	}
}

// TestInTreeCloudProviderRemoved: a Kubernetes without the in-tree
// provider is refused with what to do, whether the config is typed or
// custom.
func TestInTreeCloudProviderRemoved(t *testing.T) {
	for _, tc := range []struct{ yml, says string }{
		{"kubernetes_version: v1.30.14-rancher1-1\ncloud_provider: {name: vsphere, vsphereCloudProvider: {global: {user: u}}}\n", "Kubernetes 1.30 has no in-tree vsphere cloud provider"},
		{"kubernetes_version: v1.32.13-rancher1-3\ncloud_provider: {name: azure, customCloudProvider: \"{}\"}\n", "Kubernetes 1.32 has no in-tree azure cloud provider"},
		{"kubernetes_version: v1.26.15-rancher1-1\ncloud_provider: {name: openstack, openstackCloudProvider: {global: {username: u}}}\n", "Kubernetes 1.26 has no in-tree openstack cloud provider"},
	} {
		_, diags := spec.Parse([]byte(cloudNode+tc.yml), "cluster.yml")
		if err := diags.Err(); err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "name: external") {
			t.Errorf("%s: %v, want %q and what to do", tc.yml, err, tc.says)
		}
	}
}

// TestInTreeCloudProvider129: upstream Kubernetes 1.29 disables the in-tree
// providers by default; rigger warns and says what to do.
func TestInTreeCloudProvider129(t *testing.T) {
	_, diags := spec.Parse([]byte(cloudNode+cloudCases["vsphere"]), "cluster.yml")
	var found bool
	for _, d := range diags {
		if d.Severity == spec.SeverityWarning && strings.Contains(d.Summary, "DisableCloudProviders") && strings.Contains(d.Detail, "DisableCloudProviders=false") {
			found = true
		}
	}
	if diags.HasErrors() || !found {
		t.Errorf("vsphere at 1.29: %v, want a warning about DisableCloudProviders", diags)
	}
}
