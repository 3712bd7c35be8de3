package rkemeta

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver"
	"github.com/google/go-cmp/cmp"
	"github.com/rigger/rigger/hack/rke-metadata/rkegen"
)

// TestGeneratedUpToDate regenerates the package's data from RKE's module
// into a temporary directory and compares it with the committed files.
func TestGeneratedUpToDate(t *testing.T) {
	dir, err := rkegen.LocateRKE()
	if err != nil {
		t.Skipf("RKE %s is not in the module cache and cannot be downloaded, so the generated files are not checked: %v", rkegen.Version, err)
	}
	raw, err := rkegen.ReadData(dir)
	if err != nil {
		t.Fatal(err)
	}
	o, err := rkegen.Generate(raw)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	if err := rkegen.Write(tmp, map[string][]byte{rkegen.GoFile: o.Go}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(tmp, rkegen.GoFile))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(rkegen.GoFile)
	if err != nil {
		t.Fatalf("%v (run go generate ./spec/rkemeta)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date: run go generate ./spec/rkemeta\n%s", rkegen.GoFile, cmp.Diff(string(want), string(got)))
	}
	// The template texts are compared, not the compressed bytes, which
	// may differ between Go releases.
	texts, err := rkegen.ReadTemplates(os.DirFS("."))
	if err != nil {
		t.Fatalf("read %s: %v (run go generate ./spec/rkemeta)", rkegen.TemplatesDir, err)
	}
	if !cmp.Equal(o.Templates, texts) {
		t.Errorf("%s is out of date: run go generate ./spec/rkemeta", rkegen.TemplatesDir)
	}
}

func TestVersions(t *testing.T) {
	vs := Versions()
	if len(vs) != 104 {
		t.Errorf("%d versions, want RKE v1.8.14's 104 from 1.24 on", len(vs))
	}
	if Default() != "v1.32.13-rancher1-3" {
		t.Errorf("Default() = %s, want RKE v1.8.14's v1.32.13-rancher1-3", Default())
	}
	if vs[len(vs)-1] != "v1.32.13-rancher1-3" {
		t.Errorf("newest version %s, want RKE v1.8.14's v1.32.13-rancher1-3", vs[len(vs)-1])
	}
	if !slices.Contains(vs, Default()) {
		t.Errorf("the default %s is not among the versions", Default())
	}
	var prev semver.Version
	for i, v := range vs {
		sv, err := ParseVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		if sv.Major != 1 || sv.Minor < MinMinor {
			t.Errorf("%s is older than 1.%d", v, MinMinor)
		}
		if i > 0 && !prev.LT(sv) {
			t.Errorf("%s comes after %s", v, vs[i-1])
		}
		prev = sv
		im, ok := Images(v)
		if !ok || im.Kubernetes == "" || im.Etcd == "" || im.PodInfraContainer == "" {
			t.Errorf("Images(%s) = %+v, %v", v, im, ok)
		}
		if opts, _, err := ServiceOptionsFor(v, im.Kubernetes); err != nil || len(opts.KubeAPI) == 0 {
			t.Errorf("no service options for %s: %v", v, err)
		}
		if len(DockerVersions(v)) == 0 {
			t.Errorf("no Docker versions for %s", v)
		}
	}
}

func TestImages(t *testing.T) {
	im, ok := Images("v1.31.5-rancher1-1")
	if !ok {
		t.Fatal("v1.31.5-rancher1-1 is unknown")
	}
	// Checked by hand against RKE v1.8.14's data/data.json.
	for _, c := range []struct{ name, got, want string }{
		{"kubernetes", im.Kubernetes, "rancher/hyperkube:v1.31.5-rancher1"},
		{"etcd", im.Etcd, "rancher/mirrored-coreos-etcd:v3.5.15"},
		{"alpine", im.Alpine, "rancher/rke-tools:v0.1.109"},
		{"coredns_autoscaler", im.CoreDNSAutoscaler, "rancher/mirrored-cluster-proportional-autoscaler:v1.8.9"},
		{"canal_flannel", im.CanalFlannel, "rancher/mirrored-flannel-flannel:v0.25.1"},
		{"calico_node", im.CalicoNode, "rancher/mirrored-calico-node:v3.29.0"},
		{"ingress", im.Ingress, "rancher/nginx-ingress-controller:nginx-1.12.0-rancher1"},
		{"ingress_webhook", im.IngressWebhook, "rancher/mirrored-ingress-nginx-kube-webhook-certgen:v1.4.1"},
		{"metrics_server", im.MetricsServer, "rancher/mirrored-metrics-server:v0.7.1"},
		{"aci_ovs_container", im.AciOpenvSwitchContainer, "noiro/openvswitch:6.1.1.2.81c2369"},
		{"weave_node (none from 1.30 on)", im.WeaveNode, ""},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	for _, v := range []string{"v1.31.5", "1.31.5-rancher1-1", "v1.23.16-rancher2-3", ""} {
		if _, ok := Images(v); ok {
			t.Errorf("Images(%q) found images: RKE looks the version up exactly as written", v)
		}
	}
}

func TestInfo(t *testing.T) {
	i, ok := Info("v1.29")
	if !ok || i.MaxRKEVersion != "1.7.99" || i.MinRKEVersion != "1.6.0-rc0" {
		t.Errorf("Info(v1.29) = %+v, %v", i, ok)
	}
	if _, ok := Info("v1.23"); ok {
		t.Error("Info(v1.23): versions before 1.24 are not kept")
	}
}

func TestDockerVersions(t *testing.T) {
	got := DockerVersions("v1.32.3-rancher1-1")
	if !slices.Contains(got, "27.5.x") || !slices.Contains(got, "20.10.x") {
		t.Errorf("DockerVersions(v1.32.3-rancher1-1) = %v", got)
	}
	if got := DockerVersions("v1.24.0"); slices.Contains(got, "25.0.x") || !slices.Contains(got, "24.0.x") {
		t.Errorf("DockerVersions(v1.24.0) = %v", got)
	}
	if got := DockerVersions("v1.99.0"); got != nil {
		t.Errorf("DockerVersions(v1.99.0) = %v, want nil", got)
	}
}

// TestSupportsDocker: a node's Docker version is compared with RKE's list
// by major and minor version only, read as RKE reads them; spec's
// TestAgainstRKE checks these answers against RKE's own code.
func TestSupportsDocker(t *testing.T) {
	for _, c := range []struct {
		name, k8s, docker string
		want, wantErr     bool
	}{
		{name: "Debian's build", k8s: "v1.32.3-rancher1-1", docker: "20.10.24+dfsg1", want: true},
		{name: "upstream", k8s: "v1.32.3-rancher1-1", docker: "27.5.1", want: true},
		{name: "a release candidate", k8s: "v1.32.3-rancher1-1", docker: "27.5.0-rc.1", want: true},
		{name: "leading zeros", k8s: "v1.24.17-rancher1-1", docker: "17.03.2-ce", want: true},
		{name: "too new for the minor", k8s: "v1.32.3-rancher1-1", docker: "28.4.0"},
		{name: "28.3 is in 1.32's list", k8s: "v1.32.13-rancher1-3", docker: "28.3.3", want: true},
		{name: "27.5 is not in 1.27's list", k8s: "v1.27.16-rancher1-1", docker: "27.5.1"},
		{name: "the patch version plays no part", k8s: "v1.24.17-rancher1-1", docker: "24.0.99", want: true},
		{name: "a minor version RKE lists nothing for", k8s: "v1.33.1", docker: "20.10.24"},
		{name: "an upstream kubernetes_version", k8s: "v1.31.4", docker: "20.10.24", want: true},
		{name: "not dotted-tri", k8s: "v1.32.3-rancher1-1", docker: "20.10", wantErr: true},
		{name: "a development build", k8s: "v1.32.3-rancher1-1", docker: "dev", wantErr: true},
		{name: "a v prefix", k8s: "v1.32.3-rancher1-1", docker: "v20.10.24", wantErr: true},
		{name: "build metadata with a tilde", k8s: "v1.32.3-rancher1-1", docker: "24.0.7+ubuntu~22.04", wantErr: true},
		{name: "empty", k8s: "v1.32.3-rancher1-1", docker: "", wantErr: true},
		{name: "kubernetes_version without a patch version", k8s: "v1.32", docker: "20.10.24", wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := SupportsDocker(c.k8s, c.docker)
			if (err != nil) != c.wantErr || got != c.want {
				t.Errorf("SupportsDocker(%q, %q) = %v, %v; want %v, error %v", c.k8s, c.docker, got, err, c.want, c.wantErr)
			}
		})
	}
}

func TestServiceOptionsFor(t *testing.T) {
	for _, c := range []struct {
		name, version, image, key string
		wantErr                   bool
	}{
		{"the version's series", "v1.31.5-rancher1-1", "rancher/hyperkube:v1.31.5-rancher1", "v1.31", false},
		{"the image wins over kubernetes_version", "v1.31.5-rancher1-1", "rancher/hyperkube:v1.32.3-rancher1", "v1.32", false},
		{"sandbox: upstream version, local image", "v1.31.4", "rigger-sandbox/hyperkube:v1.31.4", "v1.31", false},
		{"registry with a port, no tag", "v1.30.2-rancher1-1", "registry.internal:5000/hyperkube", "v1.30", false},
		{"tag and digest", "v1.30.2-rancher1-1", "r.example/hyperkube:v1.27.6@sha256:0123", "v1.27", false},
		{"a tag without dots", "v1.28.9-rancher1-1", "hyperkube:latest", "v1.28", false},
		{"a series RKE does not know", "v1.31.5-rancher1-1", "hyperkube:v1.33.1", "v1.33", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, key, err := ServiceOptionsFor(c.version, c.image)
			if key != c.key || (err != nil) != c.wantErr {
				t.Errorf("ServiceOptionsFor(%s, %s) = %s, %v; want %s, error %v", c.version, c.image, key, err, c.key, c.wantErr)
			}
		})
	}
	o24, _ := ServiceOptions("v1.24.17-rancher1-1")
	o27, _ := ServiceOptions("v1.27")
	if o24.KubeController["pod-eviction-timeout"] != "5m0s" || o27.KubeController["pod-eviction-timeout"] != "" {
		t.Errorf("pod-eviction-timeout is in RKE's options up to 1.26 only: %q, %q", o24.KubeController["pod-eviction-timeout"], o27.KubeController["pod-eviction-timeout"])
	}
}

func TestImageTag(t *testing.T) {
	for in, want := range map[string]string{
		"rancher/hyperkube:v1.31.5-rancher1":     "v1.31.5-rancher1",
		"registry:5000/rancher/hyperkube":        "",
		"registry:5000/rancher/hyperkube:v1.2.3": "v1.2.3",
		"hyperkube@sha256:abcd":                  "",
		"hyperkube:v1.2.3@sha256:abcd":           "v1.2.3",
		"":                                       "",
	} {
		if got := ImageTag(in); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTemplate(t *testing.T) {
	for _, c := range []struct {
		addon, version, key string
		wantErr             bool
	}{
		// RKE's data writes some ranges with stray spaces: ">=1.31.4-rancher1-1 ".
		{AddonACI, "v1.32.3-rancher1-1", "aci-v6.1.1.2", false},
		{AddonNginxIngress, "v1.31.5-rancher1-1", "nginxingress-v1.12.0-rancher1", false},
		// and "< 1.27.15-rancher1-1", a comparator apart from its version.
		{AddonACI, "v1.27.12-rancher1-1", "aci-v6.0.4.1", false},
		{AddonACI, "v1.27.15-rancher1-1", "aci-v6.0.4.2", false},
		{AddonCalico, "v1.31.3-rancher1-1", "calico-v3.29.0", false},
		{AddonCalico, "v1.31.2-rancher2-1", "calico-v3.28.1", false},
		{AddonCanal, "v1.24.2-rancher1-1", "canal-v3.21.1", false},
		{AddonFlannel, "v1.32.3-rancher1-1", "flannel-v0.26.4", false},
		{AddonCoreDNS, "v1.28.9-rancher1-1", "coredns-v1.8.3-rancher3", false},
		{AddonKubeDNS, "v1.30.2-rancher1-1", "kubedns-v1.16", false},
		{AddonMetricsServer, "v1.28.6-rancher1-1", "metricsserver-v0.7.0", false},
		{AddonNodelocal, "v1.26.4-rancher2-1", "nodelocal-v1.21", false},
		{AddonWeave, "v1.29.6-rancher1-1", "weave-v1.22", false},
		// Versions RKE's table does not list still match a range.
		{AddonCalico, "v1.24.0", "calico-v3.21.1", false},
		{AddonCoreDNS, "v1.99.0", "coredns-v1.8.3-rancher3", false},
		// Before 1.24: the key, but not the text.
		{AddonCalico, "v1.20.15-rancher1-2", "calico-v3.17.1", true},
		// No range matches: nginx ingress has none for 1.24.0 and 1.24.1.
		{AddonNginxIngress, "v1.24.1-rancher1-1", "", true},
		// RKE drops the first character and reads the rest as semver.
		{AddonCalico, "1.31.5", "", true},
		{AddonCalico, "", "", true},
		{"cilium", "v1.31.5-rancher1-1", "", true},
	} {
		t.Run(c.addon+"@"+c.version, func(t *testing.T) {
			key, text, err := Template(c.addon, c.version)
			if key != c.key || (err != nil) != c.wantErr {
				t.Fatalf("Template(%s, %s) = %q, %v; want %q, error %v", c.addon, c.version, key, err, c.key, c.wantErr)
			}
			if err == nil && !strings.Contains(text, "kind:") {
				t.Errorf("Template(%s, %s): the text is not a manifest template:\n%.200s", c.addon, c.version, text)
			}
		})
	}
}

// TestTemplateOneRangePerVersion checks what makes Template answer as RKE:
// RKE walks a map of ranges and takes the first that matches, so its answer
// is defined only where at most one range matches. For every known version,
// every version a range names and the versions between, one range at most
// matches, and Template finds it.
func TestTemplateOneRangePerVersion(t *testing.T) {
	probes := map[string]bool{}
	for _, v := range Versions() {
		probes[v] = true
	}
	for _, ranges := range templateRanges() {
		for r := range ranges {
			for _, f := range strings.Fields(strings.NewReplacer(">", " ", "<", " ", "=", " ").Replace(r)) {
				probes["v"+f] = true
			}
		}
	}
	for _, addon := range Addons() {
		for p := range probes {
			v, err := semver.Make(p[1:])
			if err != nil {
				continue
			}
			var match []string
			for r, key := range templateRanges()[addon] {
				if fn, err := semver.ParseRange(r); err == nil && fn(v) {
					match = append(match, key)
				}
			}
			if len(match) > 1 {
				t.Errorf("%s %s matches several ranges: %v", addon, p, match)
			}
			key, _, _ := Template(addon, p)
			if len(match) == 1 && key != match[0] {
				t.Errorf("Template(%s, %s) = %s, want %s", addon, p, key, match[0])
			}
			if len(match) == 0 && key != "" {
				t.Errorf("Template(%s, %s) = %s, want none", addon, p, key)
			}
		}
	}
}

func TestKeptTemplates(t *testing.T) {
	// Every known version's template of every add-on is kept, except the
	// add-ons RKE's table has none for in that version.
	for _, v := range Versions() {
		for _, addon := range Addons() {
			key, text, err := Template(addon, v)
			if key != "" && (err != nil || text == "") {
				t.Errorf("Template(%s, %s) = %s: %v", addon, v, key, err)
			}
		}
	}
}

func TestMatchRange(t *testing.T) {
	for _, c := range []struct {
		version, rng string
		want         bool
	}{
		{"v1.27.0", ">=1.27.0-rancher0", true},
		{"v1.27.0-rancher1-1", ">=1.27.0-rancher0", true},
		{"v1.26.15-rancher1-1", ">=1.27.0-rancher0", false},
		{"v1.29.15-rancher1-1", "<1.30.0-rancher0", true},
		{"v1.30.0", "<1.30.0-rancher0", false},
	} {
		if got, err := MatchRange(c.version, c.rng); err != nil || got != c.want {
			t.Errorf("MatchRange(%s, %s) = %v, %v; want %v", c.version, c.rng, got, err, c.want)
		}
	}
	if _, err := MatchRange("", ">=1.0.0"); err == nil {
		t.Error("an empty version matched")
	}
	for _, bad := range []string{"1.31.5", "v1.31", "v", ""} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) succeeded", bad)
		}
	}
}

// TestExtendedLife: RKE v1.8.14 names the kubernetes image of its newest
// versions (from v1.31.11 and v1.32.7 on) in the rke-extended-life
// namespace, and only those.
func TestExtendedLife(t *testing.T) {
	var got []string
	for _, v := range Versions() {
		if ExtendedLife(v) {
			got = append(got, v)
		}
	}
	want := []string{"v1.31.11-rancher1-1", "v1.31.12-rancher1-1", "v1.31.13-rancher1-1", "v1.31.14-rancher1-1",
		"v1.32.7-rancher1-1", "v1.32.8-rancher1-1", "v1.32.9-rancher1-1", "v1.32.10-rancher1-1", "v1.32.11-rancher1-1",
		"v1.32.12-rancher1-1", "v1.32.13-rancher1-1", "v1.32.13-rancher1-2", "v1.32.13-rancher1-3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("extended-life versions (-want +got):\n%s", diff)
	}
	for image, want := range map[string]bool{
		"rke-extended-life/hyperkube:v1.32.13-rancher1":                        true,
		"registry.internal:5000/rke-extended-life/hyperkube:v1.32.13-rancher1": true,
		"rke-extended-life/hyperkube@sha256:0123":                              true,
		"rancher/hyperkube:v1.32.3-rancher1":                                   false,
		"rancher/rke-extended-life:v1":                                         false,
		"rke-extended-life":                                                    false,
		"":                                                                     false,
	} {
		if got := IsExtendedLifeImage(image); got != want {
			t.Errorf("IsExtendedLifeImage(%q) = %v, want %v", image, got, want)
		}
	}
}

// TestFlannelHasBlackholeRoute is RKE v1.8.14's
// blackholeCompatibleToFlannelVersion.
func TestFlannelHasBlackholeRoute(t *testing.T) {
	for image, want := range map[string]bool{
		"rancher/mirrored-flannel-flannel:v0.28.1":     true,
		"rancher/mirrored-flannel-flannel:v0.29.0":     true,
		"rancher/mirrored-flannel-flannel:v0.27.3":     false,
		"rancher/mirrored-flannel-flannel:0.28.1":      true,
		"rancher/mirrored-flannel-flannel:latest":      true,
		"registry.internal:5000/flannel":               true,
		"rancher/mirrored-flannel-flannel:v0.28.1-rc1": true,
		"": false,
	} {
		if got := FlannelHasBlackholeRoute(image); got != want {
			t.Errorf("FlannelHasBlackholeRoute(%q) = %v, want %v", image, got, want)
		}
	}
}

// TestReadTemplateMemory: a template is read alone: reading the flannel
// template allocates little more than its text, not the 10 MB of all
// templates.
func TestReadTemplateMemory(t *testing.T) {
	const key = "flannel-v0.26.4"
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	text, ok, err := templateText(key)
	runtime.ReadMemStats(&after)
	if err != nil || !ok {
		t.Fatalf("template %s: %v, kept %v", key, err, ok)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > uint64(4*len(text)+64<<10) {
		t.Errorf("reading %d bytes of template allocated %d bytes", len(text), n)
	}
	if _, ok, err := templateText("flannel-v0.1.0"); ok || err != nil {
		t.Errorf("a template rigger does not keep: kept %v, %v", ok, err)
	}
}
