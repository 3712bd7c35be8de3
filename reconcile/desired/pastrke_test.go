package desired

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/golden"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/riggermeta"
)

// loadAt returns the defaulted example cluster examples/clusters/<name>
// moved to kubernetes_version version, with extra YAML appended (keys the
// example does not set). It fails on any error diagnostic.
func loadAt(t testing.TB, name, version, extra string) *spec.Cluster {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "clusters", name, "cluster.yml"))
	if err != nil {
		t.Fatal(err)
	}
	yml := string(data) + "\nkubernetes_version: " + version + "\n" + extra
	c, diags := spec.Parse([]byte(yml), name+"@"+version)
	if diags.HasErrors() {
		t.Fatalf("load %s at %s: %v", name, version, diags.Err())
	}
	return c
}

// pastRKEExtra is what a cluster.yml on rigger's versions needs beyond the
// example: no ingress-nginx (retired).
const pastRKEExtra = "ingress: {provider: none}\n"

// minorOfVersion reads 35 from v1.35.8-rigger1.
func minorOfVersion(t testing.TB, version string) int {
	t.Helper()
	major, minor, ok := seriesNumbers(version)
	if !ok || major != 1 {
		t.Fatalf("no 1.x minor version in %s", version)
	}
	return minor
}

// TestPastRKEContainers renders the containers of every version of
// rigger's table and checks what changes past RKE's: the binaries run by
// name, no flag the minor version removed, the flags it adds.
func TestPastRKEContainers(t *testing.T) {
	kube := []string{KubeAPIServer, KubeControllerManager, KubeScheduler, Kubelet, KubeProxy}
	for _, version := range riggermeta.Versions() {
		t.Run(version, func(t *testing.T) {
			minor := minorOfVersion(t, version)
			c := loadAt(t, "three-role", version, pastRKEExtra+
				"cloud_provider: {name: external}\nenable_cri_dockerd: true\n")
			d, err := Build(c)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := riggermeta.Images(version)
			comps, _ := riggermeta.Components(version)
			seen := map[string]bool{}
			for _, n := range d.Nodes {
				for _, ct := range n.Containers {
					seen[ct.Name] = true
					args := map[string]string{}
					for _, a := range ct.Args {
						k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
						args[k] = v
					}
					if ct.Name == Etcd && ct.Image != want.Etcd {
						t.Errorf("%s: etcd image %s, want %s", n.Address, ct.Image, want.Etcd)
					}
					if !slices.Contains(kube, ct.Name) {
						continue
					}
					if ct.Image != comps[ct.Name] {
						t.Errorf("%s %s: image %s, want %s", n.Address, ct.Name, ct.Image, comps[ct.Name])
					}
					for _, g := range riggermeta.FeatureGates() {
						gate := g.Gate + "=" + strconv.FormatBool(g.Enabled)
						if set := namesGate(args["feature-gates"], g.Gate); g.Component == ct.Name && set != (minor >= g.Minor) ||
							set && !strings.Contains(args["feature-gates"], gate) {
							t.Errorf("%s %s at 1.%d: --feature-gates=%q, want %s from 1.%d", n.Address, ct.Name, minor, args["feature-gates"], gate, g.Minor)
						}
					}
					if ct.Name == Kubelet {
						// From 1.35 the pause image reaches cri-dockerd
						// through rke-tools' expansion of the port.
						wantEnv := "CRIDOCKERD_STREAM_SERVER_PORT=10010 --pod-infra-container-image=" + want.PodInfraContainer
						if got := slices.Contains(ct.Env, wantEnv); got != (minor >= 35) {
							t.Errorf("%s kubelet at 1.%d: env %q, want %q from 1.35", n.Address, minor, ct.Env, wantEnv)
						}
					}
					switch {
					case ct.Name == Kubelet:
						// rke-tools' entrypoint runs `kubelet` found on PATH.
						if len(ct.Entrypoint) != 1 || ct.Entrypoint[0] != RKEToolsEntrypoint || len(ct.Args) == 0 || ct.Args[0] != Kubelet {
							t.Errorf("%s kubelet: entrypoint %q, args %q", n.Address, ct.Entrypoint, ct.Args[:min(1, len(ct.Args))])
						}
					case len(ct.Entrypoint) != 1 || ct.Entrypoint[0] != ct.Name:
						t.Errorf("%s %s: entrypoint %q, want the binary by name on PATH", n.Address, ct.Name, ct.Entrypoint)
					}
					for k := range args {
						if r, gone := riggermeta.Removed(ct.Name, k, minor); gone {
							t.Errorf("%s %s passes --%s, removed in 1.%d", n.Address, ct.Name, k, r.Minor)
						}
					}
					for _, a := range riggermeta.AddedFlags() {
						if a.Component != ct.Name {
							continue
						}
						if got, ok := args[a.Flag]; ok != (minor >= a.Minor) || (ok && got != a.Value) {
							t.Errorf("%s %s at 1.%d: --%s=%q (set: %v), want %q from 1.%d", n.Address, ct.Name, minor, a.Flag, got, ok, a.Value, a.Minor)
						}
					}
					if ct.Name == Kubelet && args["cloud-provider"] != "external" {
						t.Errorf("%s kubelet: --cloud-provider=%q, want external", n.Address, args["cloud-provider"])
					}
				}
			}
			for _, name := range kube {
				if !seen[name] {
					t.Errorf("no %s container rendered", name)
				}
			}
		})
	}
}

// TestPastRKEGolden is the whole desired state of a cluster on one of
// rigger's versions (1.35, where the kubelet loses
// --pod-infra-container-image and gains --fail-cgroupv1=false).
func TestPastRKEGolden(t *testing.T) {
	const version = "v1.35.10-rigger1"
	d, err := Build(loadAt(t, "three-role", version, pastRKEExtra))
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "three-role-"+version+".golden"), render(t, d))
}

// TestRKEReleasesUnchanged checks that the containers of a release of
// RKE's table keep RKE's hyperkube layout (and so their spec hashes): the
// binary under /usr/local/bin and the flags rigger's later minors removed.
func TestRKEReleasesUnchanged(t *testing.T) {
	for _, version := range []string{"v1.32.13-rancher1-3", "v1.31.5-rancher1-1", "v1.24.2-rancher1-1"} {
		t.Run(version, func(t *testing.T) {
			c := loadAt(t, "three-role", version, "cloud_provider: {name: external}\n")
			d, err := Build(c)
			if err != nil {
				t.Fatal(err)
			}
			var apiArgs, kubeletArgs []string
			for _, n := range d.Nodes {
				for _, ct := range n.Containers {
					switch ct.Name {
					case KubeAPIServer:
						if ct.Entrypoint[0] != binDir+KubeAPIServer {
							t.Errorf("entrypoint %q", ct.Entrypoint)
						}
						apiArgs = ct.Args
					case Kubelet:
						kubeletArgs = ct.Args
					}
				}
			}
			if !slices.Contains(apiArgs, "--cloud-provider=external") {
				t.Errorf("kube-apiserver lost --cloud-provider=external: %q", apiArgs)
			}
			if !slices.ContainsFunc(kubeletArgs, func(a string) bool { return strings.HasPrefix(a, "--pod-infra-container-image=") }) ||
				!slices.ContainsFunc(kubeletArgs, func(a string) bool { return strings.HasPrefix(a, "--cloud-config=") }) {
				t.Errorf("kubelet lost RKE's flags: %q", kubeletArgs)
			}
			if slices.ContainsFunc(kubeletArgs, func(a string) bool { return strings.HasPrefix(a, "--fail-cgroupv1") }) {
				t.Errorf("kubelet of RKE's table gained --fail-cgroupv1: %q", kubeletArgs)
			}
		})
	}
}

// TestPinnedKubernetesImage: a system_images.kubernetes that is set runs
// all five components, on rigger's versions as on RKE's.
func TestPinnedKubernetesImage(t *testing.T) {
	const image = "registry.example.com/hyperkube:v1.36.6"
	d, err := Build(loadAt(t, "three-role", "v1.36.6-rigger1", pastRKEExtra+"system_images: {kubernetes: "+image+"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range d.Nodes {
		for _, ct := range n.Containers {
			if slices.Contains([]string{KubeAPIServer, KubeControllerManager, KubeScheduler, Kubelet, KubeProxy}, ct.Name) && ct.Image != image {
				t.Errorf("%s %s: image %s, want the one set, %s", n.Address, ct.Name, ct.Image, image)
			}
		}
	}
}

// TestFeatureGatesMerge: rigger's gates join the cluster's own
// --feature-gates, and a gate the cluster names itself is left as it is.
func TestFeatureGatesMerge(t *testing.T) {
	for _, tc := range []struct{ extra, want string }{
		{"", "ExtendWebSocketsToKubelet=false"},
		{"services: {kube-api: {extra_args: {feature-gates: \"A=true\"}}}\n", "A=true,ExtendWebSocketsToKubelet=false"},
		{"services: {kube-api: {extra_args: {feature-gates: \"A=true, ExtendWebSocketsToKubelet=true\"}}}\n", "A=true, ExtendWebSocketsToKubelet=true"},
	} {
		d, err := Build(loadAt(t, "three-role", "v1.37.2-rigger3", pastRKEExtra+tc.extra))
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, n := range d.Nodes {
			if api, ok := n.Container(KubeAPIServer); ok {
				found = true
				if !slices.Contains(api.Args, "--feature-gates="+tc.want) {
					t.Errorf("with %q: kube-apiserver %q, want --feature-gates=%s", tc.extra, api.Args, tc.want)
				}
			}
		}
		if !found {
			t.Fatal("no kube-apiserver rendered")
		}
	}
}
