package spec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/internal/rkerender"
	"github.com/rigger/rigger/spec/rkemeta"
)

// rkeConfigFiles are the files RKE v1.8.14's `rke config` writes
// (testdata/rke), with the arguments of hack/rke-render that write them.
var rkeConfigFiles = map[string][]string{
	"testdata/rke/rke-config.yml":       nil,
	"testdata/rke/rke-config-empty.yml": {"-empty"},
}

// TestRKEConfigFile loads the files `rke config` writes: the one with a
// host is valid, without a warning; the --empty one is refused for its
// empty node only, as RKE refuses it. A file of RKE before v1.6, with its
// services.kube-api.pod_security_policy, is valid with a warning.
func TestRKEConfigFile(t *testing.T) {
	_, diags, err := Load("testdata/rke/rke-config.yml")
	if err != nil || len(diags) > 0 {
		t.Errorf("rke-config.yml: %v\n%v", err, diags)
	}

	_, diags, _ = Load("testdata/rke/rke-config-empty.yml")
	if !diags.HasErrors() {
		t.Error("rke-config-empty.yml: its node has no address, user or role, and is accepted")
	}
	for _, d := range diags {
		if d.Path != "nodes" && !strings.HasPrefix(d.Path, "nodes[0].") {
			t.Errorf("rke-config-empty.yml: %s", d)
		}
	}

	b, err := os.ReadFile("testdata/rke/rke-config.yml")
	if err != nil {
		t.Fatal(err)
	}
	old := bytes.Replace(b, []byte("    pod_security_configuration: \"\"\n"), []byte("    pod_security_policy: false\n"), 1)
	if bytes.Equal(old, b) {
		t.Fatal("no pod_security_configuration in rke-config.yml")
	}
	_, diags = Parse(old, "old.yml")
	if diags.HasErrors() || len(diags) != 1 || diags[0].Path != "services.kube-api.pod_security_policy" || diags[0].Severity != SeverityWarning {
		t.Errorf("pod_security_policy: want one warning, got\n%v", diags)
	}
}

// TestAgainstRKE compares rigger with RKE v1.8.14's own code, run by
// hack/rke-render (built once for all): the files `rke config` writes,
// what RKE's parser reads, the keys it reads, and its check of the nodes'
// Docker versions.
func TestAgainstRKE(t *testing.T) {
	bin := rkerender.Binary(t)
	t.Run("rke config", func(t *testing.T) { checkRKEConfigFiles(t, bin) })
	t.Run("reads", func(t *testing.T) { checkReadsAsRKE(t, bin) })
	t.Run("keys", func(t *testing.T) { checkKeysAsRKE(t, bin) })
	t.Run("docker", func(t *testing.T) { checkDockerAsRKE(t, bin) })
}

// checkDockerAsRKE compares rigger's check of a node's Docker version
// (rkemeta.SupportsDocker, which ignore_docker_version: false turns on)
// with RKE's, for every Kubernetes version rigger knows and a few more,
// and Docker versions as engines report them.
func checkDockerAsRKE(t *testing.T, bin string) {
	k8s := append(KubernetesVersions(), "v1.31.4", "v1.33.1", "v1.32", "v1.32.03")
	docker := []string{"20.10.24+dfsg1", "20.10.24", "17.03.2-ce", "1.13.1", "19.03.15", "23.0.6", "24.0.9", "25.0.5",
		"26.1.4", "27.4.1", "27.5.1", "27.5.0-rc.1", "28.0.1", "29.1.0", "20.10", "20", "dev", "v20.10.24", "",
		"24.0.7+ubuntu~22.04", "20.10.24+dfsg1.1", "20.10.x", "020.010.1", "-1.2.3"}
	var in bytes.Buffer
	type query struct{ k8s, docker string }
	var queries []query
	for _, k := range k8s {
		for _, d := range docker {
			fmt.Fprintf(&in, "%s\t%s\n", k, d)
			queries = append(queries, query{k, d})
		}
	}
	answers := strings.Split(strings.TrimSuffix(string(rkerender.RunInput(t, bin, in.Bytes(), "-docker")), "\n"), "\n")
	if len(answers) != len(queries) {
		t.Fatalf("RKE answered %d of %d queries", len(answers), len(queries))
	}
	for i, q := range queries {
		ok, err := rkemeta.SupportsDocker(q.k8s, q.docker)
		got := "unsupported"
		switch {
		case err != nil:
			got = "error"
		case ok:
			got = "supported"
		}
		if got != answers[i] {
			t.Errorf("Kubernetes %s, Docker %q: RKE says %s, rigger %s (%v)", q.k8s, q.docker, answers[i], got, err)
		}
	}
}

// checkRKEConfigFiles checks that testdata/rke holds what RKE's own `rke
// config` writes (after the comment lines that say how it was made).
func checkRKEConfigFiles(t *testing.T, bin string) {
	for file, args := range rkeConfigFiles {
		out := filepath.Join(t.TempDir(), "cluster.yml")
		rkerender.Run(t, bin, append([]string{"-config", out}, args...)...)
		rke, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		ours, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		header, rest, _ := bytes.Cut(ours, rke[:bytes.IndexByte(rke, '\n')+1])
		for _, l := range strings.Split(strings.TrimSuffix(string(header), "\n"), "\n") {
			if !strings.HasPrefix(l, "#") {
				t.Errorf("%s: %q before RKE's text is not a comment", file, l)
			}
		}
		if diff := cmp.Diff(string(rke), string(rke[:bytes.IndexByte(rke, '\n')+1])+string(rest)); diff != "" {
			t.Errorf("%s is not what RKE writes (-RKE +file); write it again with `go run . -config FILE %s` in hack/rke-render:\n%s", file, strings.Join(args, " "), diff)
		}
	}
}

// readCase is a cluster.yml key that RKE v1.8.14 reads in its own way.
type readCase struct {
	name string
	// yml is added to a one-node cluster, or is the whole file when it
	// starts with nodes:.
	yml string
	// rigger returns what rigger read (spec.Parse, defaults applied).
	rigger func(c *Cluster) any
	// rke is the JSON pointer of the value RKE read, with RKE's json
	// names: in what its parser returned, or in its configuration after
	// its defaults (defaulted).
	rke       string
	defaulted bool
	// want is what both read, but when RKE drops the key (a spelling
	// rigger reads with a warning): then RKE's value is empty.
	want     any
	rkeDrops bool
	// warn is the summary of rigger's one warning; "" for none.
	warn string
	// refused is the summary of validate's one error for a key rigger
	// reads as RKE does but does not carry out; "" for none.
	refused string
}

const oneNode = "nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\n"

func (tc readCase) file() []byte {
	if strings.HasPrefix(tc.yml, "nodes:") {
		return []byte(tc.yml + "\n")
	}
	return []byte(oneNode + tc.yml + "\n")
}

var readCases = []readCase{
	{
		name:   "network tolerationseconds",
		yml:    "network: {tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationseconds: 300}]}",
		rigger: func(c *Cluster) any { return c.Network.Tolerations[0].TolerationSeconds },
		rke:    "/network/tolerations/0/tolerationSeconds", want: 300,
	},
	{
		name:   "ingress tolerationseconds",
		yml:    "ingress: {tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationseconds: 30}]}",
		rigger: func(c *Cluster) any { return c.Ingress.Tolerations[0].TolerationSeconds },
		rke:    "/ingress/tolerations/0/tolerationSeconds", want: 30,
	},
	{
		name:   "dns tolerationseconds",
		yml:    "dns: {tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationseconds: 40}]}",
		rigger: func(c *Cluster) any { return c.DNS.Tolerations[0].TolerationSeconds },
		rke:    "/dns/tolerations/0/tolerationSeconds", want: 40,
	},
	{
		name:   "monitoring tolerationseconds",
		yml:    "monitoring: {tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationseconds: 50}]}",
		rigger: func(c *Cluster) any { return c.Monitoring.Tolerations[0].TolerationSeconds },
		rke:    "/monitoring/tolerations/0/tolerationSeconds", want: 50,
	},
	{
		name:   "tolerationSeconds, which RKE drops",
		yml:    "network: {tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 300}]}",
		rigger: func(c *Cluster) any { return c.Network.Tolerations[0].TolerationSeconds },
		rke:    "/network/tolerations/0/tolerationSeconds", want: 300, rkeDrops: true,
		warn: `RKE ignores "tolerationSeconds"`,
	},
	{
		name:   "rotate_certificates.cacertificates",
		yml:    "rotate_certificates: {cacertificates: true}",
		rigger: func(c *Cluster) any { return c.RotateCertificates.CACertificates },
		rke:    "/rotateCertificates/caCertificates", want: true,
	},
	{
		name:   "caCertificates, which RKE drops",
		yml:    "rotate_certificates: {caCertificates: true, services: [etcd]}",
		rigger: func(c *Cluster) any { return c.RotateCertificates.CACertificates },
		rke:    "/rotateCertificates/caCertificates", want: true, rkeDrops: true,
		warn: `RKE ignores "caCertificates"`,
	},
	{
		name:   "calico_network_provider.cloudprovider",
		yml:    "network: {plugin: calico, calico_network_provider: {cloudprovider: aws}}",
		rigger: func(c *Cluster) any { return c.Network.CalicoNetworkProvider.CloudProvider },
		rke:    "/network/calicoNetworkProvider/cloudProvider", want: "aws",
	},
	{
		name:   "calico cloud_provider, which RKE drops",
		yml:    "network: {plugin: calico, calico_network_provider: {cloud_provider: aws}}",
		rigger: func(c *Cluster) any { return c.Network.CalicoNetworkProvider.CloudProvider },
		rke:    "/network/calicoNetworkProvider/cloudProvider", want: "aws", rkeDrops: true,
		warn: `RKE ignores "cloud_provider"`,
	},
	{
		// RKE itself fails on rollingupdate: {maxunavailable: 2}, all in
		// lower case: yaml.v2 reads that spelling first, into an
		// intstr.IntOrString it cannot fill. rigger reads it.
		name:   "update_strategy keys in any case",
		yml:    "network: {update_strategy: {Strategy: RollingUpdate, rollingupdate: {MaxUnavailable: 2}}}",
		rigger: func(c *Cluster) any { return c.Network.UpdateStrategy.RollingUpdate.MaxUnavailable },
		rke:    "/network/updateStrategy/rollingUpdate/maxUnavailable", want: 2,
	},
	{
		name:   "update_strategy strategy in any case",
		yml:    "dns: {update_strategy: {STRATEGY: Recreate}}",
		rigger: func(c *Cluster) any { return c.DNS.UpdateStrategy.Strategy },
		rke:    "/dns/updateStrategy/strategy", want: "Recreate",
	},
	{
		name:   "nodelocal update_strategy as Kubernetes writes it",
		yml:    "dns: {nodelocal: {ip_address: 169.254.20.10, update_strategy: {strategy: RollingUpdate, rollingUpdate: {maxUnavailable: 25%}}}}",
		rigger: func(c *Cluster) any { return c.DNS.Nodelocal.UpdateStrategy.RollingUpdate.MaxUnavailable },
		rke:    "/dns/nodelocal/updateStrategy/rollingUpdate/maxUnavailable", want: "25%",
	},
	{
		name:   "addon_job_timeout 0 is unset",
		yml:    "addon_job_timeout: 0",
		rigger: func(c *Cluster) any { return c.AddonJobTimeout },
		rke:    "/addonJobTimeout", defaulted: true, want: 45,
	},
	{
		name:   "backup_config.interval_hours 0 is unset",
		yml:    "services: {etcd: {backup_config: {interval_hours: 0, retention: 0, timeout: 0}}}",
		rigger: func(c *Cluster) any { return c.Services.Etcd.BackupConfig.IntervalHours },
		rke:    "/services/etcd/backupConfig/intervalHours", defaulted: true, want: 12,
	},
	{
		name:   "backup_config.retention 0 is unset",
		yml:    "services: {etcd: {backup_config: {interval_hours: 0, retention: 0, timeout: 0}}}",
		rigger: func(c *Cluster) any { return c.Services.Etcd.BackupConfig.Retention },
		rke:    "/services/etcd/backupConfig/retention", defaulted: true, want: 6,
	},
	{
		name:   "backup_config.timeout 0 is unset",
		yml:    "services: {etcd: {backup_config: {interval_hours: 0, retention: 0, timeout: 0}}}",
		rigger: func(c *Cluster) any { return c.Services.Etcd.BackupConfig.Timeout },
		rke:    "/services/etcd/backupConfig/timeout", defaulted: true, want: 300,
	},
	{
		name:   "bastion_host without an address is none",
		yml:    `bastion_host: {address: "", port: "", user: "", ssh_key: "", ssh_key_path: ""}`,
		rigger: func(c *Cluster) any { return c.BastionHost.Port },
		rke:    "/bastionHost/port", defaulted: true, want: "",
	},
	{
		name:   "bastion_host with no address but a user",
		yml:    `bastion_host: {address: "", user: jump}`,
		rigger: func(c *Cluster) any { return c.BastionHost.Port },
		rke:    "/bastionHost/port", defaulted: true, want: "",
		warn: "bastion_host has no address: no jump host is used, and its other keys are ignored",
	},
	{
		name: "pod_security_policy of RKE before v1.6",
		yml:  "services: {kube-api: {pod_security_policy: true}}",
		warn: "RKE v1.6.0 removed pod_security_policy and ignores it, and so does rigger",
	},
	{
		name: "pod_security_policy at the top level",
		yml:  "pod_security_policy: false",
		warn: "pod_security_policy was a key of services.kube-api, which RKE v1.6.0 removed; RKE ignores it here, and so does rigger",
	},
	{
		// Not in RKE v1.8.1; RKE v1.8.14's defaults copy it into network.options.
		name:   "canal_network_provider.blackhole_route",
		yml:    `network: {plugin: canal, canal_network_provider: {blackhole_route: "true"}}`,
		rigger: func(c *Cluster) any { return c.Network.CanalNetworkProvider.BlackholeRoute },
		rke:    "/network/options/canal_blackhole_route", defaulted: true, want: "true",
	},
	{
		name: "canal_blackhole_route with a flannel before v0.28.1",
		yml:  "kubernetes_version: v1.31.14-rancher1-1\nnetwork: {plugin: canal, options: {canal_blackhole_route: \"true\"}}",
		warn: "Blackhole route requires Flannel version >= v0.28.1, disabling it for image [rancher/mirrored-flannel-flannel:v0.27.3]",
	},
	{
		name:   "services.kube-api.image is replaced by system_images.kubernetes",
		yml:    "services: {kube-api: {image: registry.internal/hyperkube:v1.32.0-custom}}",
		rigger: func(c *Cluster) any { return c.Services.KubeAPI.Image },
		rke:    "/services/kubeApi/image", defaulted: true,
		want: tableImage(func(im SystemImages) string { return im.Kubernetes }),
		warn: "services.kube-api.image registry.internal/hyperkube:v1.32.0-custom is replaced by system_images.kubernetes",
	},
	{
		name:   "services.etcd.image is replaced by system_images.etcd",
		yml:    "system_images: {etcd: registry.internal/etcd:v3.5.16}\nservices: {etcd: {image: registry.internal/etcd:v3.5.21}}",
		rigger: func(c *Cluster) any { return c.Services.Etcd.Image },
		rke:    "/services/etcd/image", defaulted: true, want: "registry.internal/etcd:v3.5.16",
		warn: "services.etcd.image registry.internal/etcd:v3.5.21 is replaced by system_images.etcd",
	},
	{
		name:   "services.kubelet.image equal to system_images.kubernetes",
		yml:    "system_images: {kubernetes: registry.internal/hyperkube:v1.32.13}\nservices: {kubelet: {image: registry.internal/hyperkube:v1.32.13}}",
		rigger: func(c *Cluster) any { return c.Services.Kubelet.Image },
		rke:    "/services/kubelet/image", defaulted: true, want: "registry.internal/hyperkube:v1.32.13",
	},
	{
		// RKE has default flags back to 1.9; 1.24 and later is rigger's
		// policy, and the error says so.
		name: "a kubernetes image of 1.23",
		yml:  "system_images: {kubernetes: rancher/hyperkube:v1.23.16-rancher2}",
		rke:  "/systemImages/kubernetes", defaulted: true, want: "rancher/hyperkube:v1.23.16-rancher2",
		refused: "rancher/hyperkube:v1.23.16-rancher2: rigger runs Kubernetes 1.24 and later, not v1.23",
	},
	{
		// RKE's parser reads it; `rke up` then replaces it with its
		// --ignore-docker-version flag (cmd.setOptionsFromCLI).
		name:   "ignore_docker_version: true",
		yml:    "ignore_docker_version: true",
		rigger: func(c *Cluster) any { return *c.IgnoreDockerVersion },
		rke:    "/ignoreDockerVersion", want: true,
		warn: "rke up ignores ignore_docker_version and checks each node's Docker version unless given --ignore-docker-version, and so does rigger",
	},
	{
		// Rancher's HA example. With backup_config null, RKE runs its
		// etcd-rolling-snapshots with --creation and --retention (an age);
		// with backup_config, --retention=<retention × interval_hours>h.
		name:   "backup_config null: creation is the interval",
		yml:    "services: {etcd: {snapshot: true, creation: 6h, retention: 24h, backup_config: null}}",
		rigger: func(c *Cluster) any { return fmt.Sprintf("%dh", c.Services.Etcd.BackupConfig.IntervalHours) },
		rke:    "/services/etcd/creation", defaulted: true, want: "6h",
	},
	{
		name: "backup_config null: retention is the age kept",
		yml:  "services: {etcd: {snapshot: true, creation: 6h, retention: 24h, backup_config: null}}",
		rigger: func(c *Cluster) any {
			b := c.Services.Etcd.BackupConfig
			return fmt.Sprintf("%dh", b.Retention*b.IntervalHours)
		},
		rke: "/services/etcd/retention", defaulted: true, want: "24h",
	},
	{
		name: "backup_config absent: RKE's defaults 12h and 72h",
		yml:  "services: {etcd: {snapshot: true}}",
		rigger: func(c *Cluster) any {
			return fmt.Sprintf("%dh", c.Services.Etcd.BackupConfig.Retention*c.Services.Etcd.BackupConfig.IntervalHours)
		},
		rke: "/services/etcd/retention", defaulted: true, want: "72h",
	},
	{
		name:   "creation with backup_config set is ignored",
		yml:    "services: {etcd: {creation: 6h, backup_config: {interval_hours: 3}}}",
		rigger: func(c *Cluster) any { return c.Services.Etcd.BackupConfig.IntervalHours },
		rke:    "/services/etcd/backupConfig/intervalHours", defaulted: true, want: 3,
		warn: "services.etcd.creation is ignored because backup_config is set",
	},
	{
		// RKE v1.8.14 reads authorization.options and passes it nowhere.
		name:   "authorization.options",
		yml:    "authorization: {mode: rbac, options: {authorization-webhook-version: v1}}",
		rigger: func(c *Cluster) any { return c.Authorization.Options["authorization-webhook-version"] },
		rke:    "/authorization/options/authorization-webhook-version", want: "v1",
		warn: "RKE reads authorization.options and never uses it, and rigger ignores it too",
	},
	{
		name:   "authorization.options empty, as `rke config` writes it",
		yml:    "authorization: {mode: rbac, options: {}}",
		rigger: func(c *Cluster) any { return len(c.Authorization.Options) },
		want:   0,
	},
	{
		name: "a taint's timeAdded",
		yml:  "nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker], taints: [{key: a, value: b, effect: NoExecute, timeAdded: \"2025-01-01T00:00:00Z\"}]}]",
		warn: "RKE reads timeAdded but never uses it, and rigger ignores it too",
	},
	{
		// RKE decodes node_drain_input again with encoding/json when one
		// of ignore_daemonsets, timeout and grace_period is missing, and
		// that loses ignore_daemonsets (its json name is ignoreDaemonSets):
		// RKE then drains ignoring DaemonSets.
		name:   "ignore_daemonsets false without timeout",
		yml:    "upgrade_strategy: {drain: true, node_drain_input: {ignore_daemonsets: false}}",
		rigger: func(c *Cluster) any { return c.UpgradeStrategy.DrainInput.IgnoreDaemonSets },
		rke:    "/upgradeStrategy/nodeDrainInput/ignoreDaemonSets", defaulted: true, want: false, rkeDrops: true,
		warn: "RKE ignores ignore_daemonsets: false unless timeout and grace_period are given too",
	},
	{
		name:   "ignore_daemonsets false with timeout and grace_period",
		yml:    "upgrade_strategy: {drain: true, node_drain_input: {ignore_daemonsets: false, timeout: 60, grace_period: 10}}",
		rigger: func(c *Cluster) any { return c.UpgradeStrategy.DrainInput.IgnoreDaemonSets },
		rke:    "/upgradeStrategy/nodeDrainInput/ignoreDaemonSets", defaulted: true, want: false,
	},
	{
		name:   "cloud_provider external",
		yml:    "cloud_provider: {name: external}",
		rigger: func(c *Cluster) any { return c.CloudProvider.Name },
		rke:    "/cloudProvider/name", defaulted: true, want: "external",
	},
	{
		name:   "is_default prefixes the table's kubernetes image",
		yml:    "private_registries: [{url: other.example, user: u, password: p}, {url: registry.internal:5000, is_default: true}]",
		rigger: func(c *Cluster) any { return c.SystemImages.Kubernetes },
		rke:    "/systemImages/kubernetes", defaulted: true,
		want: "registry.internal:5000/" + tableImage(func(im SystemImages) string { return im.Kubernetes }),
	},
	{
		name:   "is_default prefixes the table's rke-tools, whatever its path",
		yml:    "private_registries: [{url: registry.internal:5000/mirror/x, is_default: true}]",
		rigger: func(c *Cluster) any { return c.SystemImages.Alpine },
		rke:    "/systemImages/alpine", defaulted: true,
		want: "registry.internal:5000/mirror/x/" + tableImage(func(im SystemImages) string { return im.Alpine }),
	},
	{
		name:   "is_default prefixes the add-ons' images",
		yml:    "private_registries: [{url: registry.internal:5000, is_default: true}]",
		rigger: func(c *Cluster) any { return c.SystemImages.CoreDNS },
		rke:    "/systemImages/coredns", defaulted: true,
		want: "registry.internal:5000/" + tableImage(func(im SystemImages) string { return im.CoreDNS }),
	},
	{
		name:   "is_default without url prefixes nothing",
		yml:    "private_registries: [{user: u, password: p, is_default: true}]",
		rigger: func(c *Cluster) any { return c.SystemImages.Kubernetes },
		rke:    "/systemImages/kubernetes", defaulted: true,
		want: tableImage(func(im SystemImages) string { return im.Kubernetes }),
	},
}

// tableImage is an image of the default version in the version table.
func tableImage(f func(SystemImages) string) string {
	im, _ := KnownImages(DefaultKubernetesVersion)
	return f(im)
}

// TestReadsAsRKE checks what rigger reads of the keys RKE reads its own way
// (readCases), and the one warning it gives.
func TestReadsAsRKE(t *testing.T) {
	for _, tc := range readCases {
		t.Run(tc.name, func(t *testing.T) {
			c, diags := Parse(tc.file(), "cluster.yml")
			var warns, errs []string
			for _, d := range diags {
				if d.Severity == SeverityError {
					errs = append(errs, d.Summary)
				} else {
					warns = append(warns, d.Summary)
				}
			}
			if want := []string{tc.refused}; (tc.refused == "" && len(errs) > 0) || (tc.refused != "" && !slices.Equal(errs, want)) || c == nil {
				t.Fatalf("errors %q, want %q", errs, tc.refused)
			}
			var want []string
			if tc.warn != "" {
				want = []string{tc.warn}
			}
			if diff := cmp.Diff(want, warns); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if tc.rigger != nil {
				if got, want := jsonText(t, tc.rigger(c)), jsonText(t, tc.want); got != want {
					t.Errorf("rigger read %s, want %s", got, want)
				}
			}
		})
	}
}

// TestOneKeyTwoSpellings: a key given in two spellings rigger reads is
// an error, as a key given twice is.
func TestOneKeyTwoSpellings(t *testing.T) {
	for _, yml := range []string{
		"network: {tolerations: [{key: k, operator: Exists, tolerationseconds: 1, tolerationSeconds: 2}]}",
		"dns: {update_strategy: {strategy: Recreate, Strategy: RollingUpdate}}",
	} {
		_, diags := Parse([]byte(oneNode+yml+"\n"), "cluster.yml")
		if !diags.HasErrors() || !strings.Contains(diags.Err().Error(), "is given twice, as") {
			t.Errorf("%s: want an error, got %v", yml, diags)
		}
	}
}

// checkReadsAsRKE runs RKE v1.8.14's own parser (hack/rke-render -parse:
// cluster.ParseConfig, then InitClusterObject's defaults and validation) on
// every readCase: RKE accepts each file, as rigger does, and reads what the
// case says RKE reads.
func checkReadsAsRKE(t *testing.T, bin string) {
	in, out := t.TempDir(), t.TempDir()
	args := []string{"-parse", "-out", out}
	for i, tc := range readCases {
		f := filepath.Join(in, fmt.Sprintf("case%d.yml", i))
		if err := os.WriteFile(f, tc.file(), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, f)
	}
	rkerender.Run(t, bin, args...)
	for i, tc := range readCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(out, fmt.Sprintf("case%d", i))
			for _, f := range []string{"error.txt", "init-error.txt"} {
				if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
					t.Fatalf("RKE refuses the file, which rigger accepts: %s", b)
				}
			}
			if tc.rke == "" {
				return
			}
			file := "config.json"
			if tc.defaulted {
				file = "defaulted.json"
			}
			b, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			var doc any
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			got := jsonText(t, pointer(doc, tc.rke))
			switch want := jsonText(t, tc.want); {
			case tc.rkeDrops && !emptyJSON(got):
				t.Errorf("RKE read %s at %s, want nothing: it drops the key", got, tc.rke)
			case !tc.rkeDrops && got != want && !(emptyJSON(got) && emptyJSON(want)):
				t.Errorf("RKE read %s at %s, want %s", got, tc.rke, want)
			}
		})
	}
}

// emptyJSON reports whether s is an empty value in JSON (RKE's json names
// leave most of them out).
func emptyJSON(s string) bool {
	return s == "null" || s == `""` || s == "false" || s == "0"
}

// pointer returns the value at JSON pointer p in doc, nil when absent.
func pointer(doc any, p string) any {
	for _, k := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		switch v := doc.(type) {
		case map[string]any:
			doc = v[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(v) {
				return nil
			}
			doc = v[i]
		default:
			return nil
		}
	}
	return doc
}

// jsonText is v as JSON, a number or string holding a number written as
// the number (RKE reads maxUnavailable as an int-or-string, rigger as a
// string).
func jsonText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := strconv.Unquote(string(b)); err == nil {
		if _, err := strconv.Atoi(s); err == nil {
			return s
		}
	}
	return string(b)
}

// riggerOnlyKeys are the keys rigger reads and RKE v1.8.14 does not, with
// why they exist.
var riggerOnlyKeys = map[string]string{
	"rigger":                               "rigger's own settings",
	"nodes[].transport":                    "how rigger reaches the node",
	"restore.id":                           "the id of a restore request, so that each is carried out once",
	"system_images.calico_tigera_operator": "the Tigera operator's image, which RKE v1.8.14's table never fills",
}

// checkKeysAsRKE compares the keys rigger reads with those RKE v1.8.14's
// parser reads (hack/rke-render -keys, from RKE's types and the rules of
// yaml.v2 and encoding/json): the same keys with the same spelling, read
// in any case where RKE reads them so, and Kubernetes objects where RKE
// decodes them as such; rigger's own keys (riggerOnlyKeys), the spellings
// RKE drops that rigger reads with a warning (aliases) and the keys that
// do nothing (ignoredKeys) aside.
func checkKeysAsRKE(t *testing.T, bin string) {
	rke := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(rkerender.Run(t, bin, "-keys"))), "\n") {
		p, how, _ := strings.Cut(l, "\t")
		rke[p] = how
	}
	ours, aliases := schemaKeys()
	for p, how := range rke {
		if _, ok := ignoredKeys[p]; ok {
			continue // read with a warning that it does nothing
		}
		switch got, ok := ours[p]; {
		case !ok:
			t.Errorf("RKE reads %s (%s), rigger refuses it", p, how)
		case got != how:
			t.Errorf("%s: RKE reads it as %s, rigger as %s", p, how, got)
		}
	}
	for p := range ours {
		if _, ok := rke[p]; ok || underRiggerOnly(p) {
			continue
		}
		t.Errorf("rigger reads %s, which RKE ignores (make it a rigger key, riggerOnlyKeys, or an alias)", p)
	}
	for alias, p := range aliases {
		if _, ok := rke[alias]; ok {
			t.Errorf("%s is an alias of %s, but RKE reads it", alias, p)
		}
	}
}

func underRiggerOnly(p string) bool {
	for k := range riggerOnlyKeys {
		if p == k || strings.HasPrefix(p, k+".") {
			return true
		}
	}
	return false
}

// schemaKeys lists the keys of the schema as checkKeysAsRKE compares them:
// by path (`[]` for a list item, `.*` for a map entry of a mapping type),
// read as "yaml" (exact name), "json-fold" (any case) or "object" (a
// Kubernetes object); and the aliases, by path, with the key each stands
// for.
func schemaKeys() (keys, aliases map[string]string) {
	keys, aliases = map[string]string{}, map[string]string{}
	objects := []reflect.Type{reflect.TypeFor[Object](), reflect.TypeFor[[]Object]()}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for {
			switch t.Kind() {
			case reflect.Pointer:
				t = t.Elem()
				continue
			case reflect.Slice:
				path, t = path+"[]", t.Elem()
				continue
			case reflect.Map:
				path, t = path+".*", t.Elem()
				continue
			}
			break
		}
		if t.Kind() != reflect.Struct || t == reflect.TypeFor[Duration]() {
			return
		}
		for _, f := range fieldsOf(t) {
			p := join(path, f.name)
			switch {
			case slices.Contains(objects, f.typ):
				keys[p] = "object"
				continue
			case f.fold:
				keys[p] = "json-fold"
			default:
				keys[p] = "yaml"
			}
			if f.alias != "" {
				aliases[join(path, f.alias)] = p
			}
			walk(f.typ, p)
		}
	}
	walk(reflect.TypeFor[Cluster](), "")
	return keys, aliases
}
