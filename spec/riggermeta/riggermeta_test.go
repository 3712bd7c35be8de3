package riggermeta

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver"
	"github.com/google/go-cmp/cmp"
	"github.com/rigger/rigger/spec/rkemeta"
)

func TestVersions(t *testing.T) {
	vs := Versions()
	if len(vs) != LastMinor-FirstMinor+1 {
		t.Fatalf("%d versions, want one per minor %d to %d: %v", len(vs), FirstMinor, LastMinor, vs)
	}
	for i, v := range vs {
		sv, err := rkemeta.ParseVersion(v)
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		if sv.Major != 1 || int(sv.Minor) != FirstMinor+i || !strings.Contains(v, Suffix) {
			t.Errorf("version %d is %s, want v1.%d.<patch>%s<revision>", i, v, FirstMinor+i, Suffix)
		}
		if _, ok := retired[v]; ok {
			t.Errorf("%s is both an entry and retired", v)
		}
		if _, ok := rkemeta.Images(v); ok {
			t.Errorf("%s is in RKE's table too", v)
		}
		if !IsRigger(v) {
			t.Errorf("IsRigger(%s) = false", v)
		}
	}
	all := AllVersions()
	if !slices.Equal(all[:len(all)-len(vs)], rkemeta.Versions()) || !slices.Equal(all[len(all)-len(vs):], vs) {
		t.Errorf("AllVersions is not RKE's versions then rigger's")
	}
	if IsRigger(rkemeta.DefaultVersion) {
		t.Errorf("RKE's default is marked rigger's")
	}
}

// etcdVersion reads 3.6.11 from registry.k8s.io/etcd:3.6.11-0.
func etcdVersion(t *testing.T, image string) semver.Version {
	t.Helper()
	tag := rkemeta.ImageTag(image)
	i := strings.LastIndexByte(tag, '-')
	v, err := semver.Parse(tag[:i])
	if err != nil {
		t.Fatalf("etcd image %s: %v", image, err)
	}
	return v
}

func TestImages(t *testing.T) {
	prev := semver.Version{}
	base, _ := rkemeta.Images(baseVersion)
	for _, v := range Versions() {
		im, ok := Images(v)
		if !ok {
			t.Fatalf("no images for %s", v)
		}
		sv, _ := rkemeta.ParseVersion(v)
		minor := int(sv.Minor)
		rv := reflect.ValueOf(im)
		for i := range rv.NumField() {
			name, got := rv.Type().Field(i).Name, rv.Field(i).String()
			switch name {
			case "Ingress", "IngressBackend", "IngressWebhook", "WindowsPodInfraContainer":
				if got != "" {
					t.Errorf("%s: %s = %s, want none", v, name, got)
				}
			case "Kubernetes":
				if got != "" {
					t.Errorf("%s: kubernetes = %s, want none: each component has its own image", v, got)
				}
			default:
				if got == "" && reflect.ValueOf(base).Field(i).String() != "" {
					t.Errorf("%s: %s has no image", v, name)
				}
				if rkemeta.IsExtendedLifeImage(got) {
					t.Errorf("%s: %s = %s needs a subscription", v, name, got)
				}
			}
		}
		// etcd follows the minor version, and every step is one etcd
		// supports: 3.6 only from 3.5.26 on, 3.7 only from 3.6.11 on.
		ev := etcdVersion(t, im.Etcd)
		want := map[int]string{33: "3.5.26", 34: "3.6.4", 35: "3.6.6", 36: "3.6.11", 37: "3.7.0"}[minor]
		if ev.LT(semver.MustParse(want)) {
			t.Errorf("%s: etcd %s, want %s or later", v, ev, want)
		}
		if prev.Major != 0 && ev.Minor > prev.Minor {
			from := map[uint64]string{5: "3.5.26", 6: "3.6.11"}[prev.Minor]
			if prev.LT(semver.MustParse(from)) {
				t.Errorf("%s: etcd %s follows %s, which must be %s or later first", v, ev, prev, from)
			}
		}
		prev = ev
		if got, _ := AllImages(v); got != im {
			t.Errorf("AllImages(%s) differs from Images", v)
		}
		// Each component runs upstream's patch release the version
		// names: registry.k8s.io's own images, Talos' kubelet.
		comps, ok := Components(v)
		upstream, _, _ := strings.Cut(v, Suffix)
		wantComps := ComponentImages{
			KubeAPIServer:         "registry.k8s.io/kube-apiserver:" + upstream,
			KubeControllerManager: "registry.k8s.io/kube-controller-manager:" + upstream,
			KubeScheduler:         "registry.k8s.io/kube-scheduler:" + upstream,
			KubeProxy:             "registry.k8s.io/kube-proxy:" + upstream,
			Kubelet:               "ghcr.io/siderolabs/kubelet:" + upstream + "-fat",
		}
		if diff := cmp.Diff(wantComps, comps); !ok || diff != "" {
			t.Errorf("%s: components (-want +got):\n%s", v, diff)
		}
	}
	for _, v := range []string{rkemeta.DefaultVersion, "v1.24.2-rancher1-1"} {
		want, _ := rkemeta.Images(v)
		if got, ok := AllImages(v); !ok || got != want {
			t.Errorf("AllImages(%s) is not RKE's", v)
		}
	}
	if _, ok := AllImages("v1.31.5"); ok {
		t.Errorf("AllImages found v1.31.5, spelled otherwise than RKE's table")
	}
}

func TestServiceOptionsFor(t *testing.T) {
	for _, tc := range []struct {
		name, version, image, key string
		fails                     bool
	}{
		{"RKE's default", rkemeta.DefaultVersion, "rke-extended-life/hyperkube:v1.32.13-rancher1", "v1.32", false},
		{"RKE's version with an image of 1.31", rkemeta.DefaultVersion, "rancher/hyperkube:v1.31.5-rancher1", "v1.31", false},
		{"CKE's tag", "v1.33.13-rigger1", "ghcr.io/cybozu/kubernetes:1.33.7.1", "v1.33", false},
		{"a recipe image", "v1.36.6-rigger1", "registry.example.com/hyperkube:v1.36.3", "v1.36", false},
		{"a tag without a version", "v1.37.2-rigger3", "registry.example.com/hyperkube:latest", "v1.37", false},
		{"no image", "v1.34.9-rigger2", "", "v1.34", false},
		{"a patch of the rule", "v1.35.12", "", "v1.35", false},
		{"an image past RKE on RKE's version", rkemeta.DefaultVersion, "registry.example.com/hyperkube:v1.35.4", "v1.35", false},
		{"past rigger's table", "v1.38.0", "registry.example.com/hyperkube:v1.38.0", "v1.38", true},
		{"before 1.24", rkemeta.DefaultVersion, "rancher/hyperkube:v1.23.16-rancher2", "v1.23", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, key, err := ServiceOptionsFor(tc.version, tc.image)
			if (err != nil) != tc.fails {
				t.Fatalf("error %v, want failure %v", err, tc.fails)
			}
			if tc.key != "" && key != tc.key {
				t.Errorf("key %s, want %s", key, tc.key)
			}
			// Wherever RKE answers, the answer is RKE's.
			if ro, rkey, rerr := rkemeta.ServiceOptionsFor(tc.version, tc.image); rerr == nil {
				o, key, err := ServiceOptionsFor(tc.version, tc.image)
				if err != nil || key != rkey || !reflect.DeepEqual(o, ro) {
					t.Errorf("differs from RKE's answer %s", rkey)
				}
			}
		})
	}
}

func TestServiceOptions(t *testing.T) {
	base, _ := rkemeta.ServiceOptions(BaseSeries)
	for minor := FirstMinor; minor <= LastMinor; minor++ {
		series := fmt.Sprintf("v1.%d", minor)
		o, ok := ServiceOptions(series)
		if !ok {
			t.Fatalf("no options for %s", series)
		}
		want := base.Kubelet
		if minor >= 35 {
			want = map[string]string{}
			for k, v := range base.Kubelet {
				want[k] = v
			}
			want["fail-cgroupv1"] = "false"
		}
		if diff := cmp.Diff(want, o.Kubelet); diff != "" {
			t.Errorf("%s kubelet (-want +got):\n%s", series, diff)
		}
		if diff := cmp.Diff(base.KubeAPI, o.KubeAPI); diff != "" {
			t.Errorf("%s kube-apiserver differs from RKE's 1.32 (-want +got):\n%s", series, diff)
		}
	}
	if _, ok := ServiceOptions("v1.32"); ok {
		t.Errorf("rigger has options for RKE's v1.32")
	}
	if _, ok := ServiceOptions("v1.38"); ok {
		t.Errorf("rigger has options for v1.38")
	}
	if _, ok := base.Kubelet["fail-cgroupv1"]; ok {
		t.Errorf("RKE's own options were changed")
	}
}

func TestRemoved(t *testing.T) {
	for _, tc := range []struct {
		component, flag string
		minor           int
		removed         bool
	}{
		{KubeAPIServer, "cloud-provider", 32, false},
		{KubeAPIServer, "cloud-provider", 33, true},
		{KubeAPIServer, "cloud-config", 37, true},
		{KubeControllerManager, "cloud-provider", 37, false},
		{Kubelet, "cloud-provider", 37, false},
		{Kubelet, "cloud-config", 33, false},
		{Kubelet, "cloud-config", 34, true},
		{Kubelet, "register-schedulable", 34, true},
		{Kubelet, "pod-infra-container-image", 34, false},
		{Kubelet, "pod-infra-container-image", 35, true},
		{KubeProxy, "pod-infra-container-image", 37, false},
	} {
		if _, got := Removed(tc.component, tc.flag, tc.minor); got != tc.removed {
			t.Errorf("Removed(%s, %s, 1.%d) = %v, want %v", tc.component, tc.flag, tc.minor, got, tc.removed)
		}
	}
}

func TestDocker(t *testing.T) {
	rke := rkemeta.DockerVersions(rkemeta.DefaultVersion)
	for _, v := range Versions() {
		if got := DockerVersions(v); !slices.Equal(got, rke) {
			t.Errorf("DockerVersions(%s) = %v, want RKE's of 1.32 %v", v, got, rke)
		}
		for _, tc := range []struct {
			docker string
			ok     bool
		}{{"28.3.1", true}, {"20.10.24+dfsg1", true}, {"29.1.0", false}} {
			want, _ := rkemeta.SupportsDocker(rkemeta.DefaultVersion, tc.docker)
			got, err := SupportsDocker(v, tc.docker)
			if err != nil || got != want || got != tc.ok {
				t.Errorf("SupportsDocker(%s, %s) = %v, %v; want %v", v, tc.docker, got, err, tc.ok)
			}
		}
	}
	if got := DockerVersions("v1.38.0"); got != nil {
		t.Errorf("DockerVersions(v1.38.0) = %v, want none", got)
	}
	if got, want := DockerVersions("v1.31.5-rancher1-1"), rkemeta.DockerVersions("v1.31.5-rancher1-1"); !slices.Equal(got, want) {
		t.Errorf("DockerVersions of RKE's 1.31 = %v, want RKE's %v", got, want)
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		version, upstream string
	}{
		{"v1.35.10-rigger1", "v1.35.10"},
		{"v1.35.12", "v1.35.12"},
		{"v1.33.2", "v1.33.2"},
		{"v1.37.0", "v1.37.0"},
		{"v1.35.10-rigger7", ""}, // not the table's revision
		{"v1.35.8-rigger1", ""},  // retired
		{"v1.38.0", ""},
		{"v1.32.13", ""}, // RKE's minor
		{"v1.35", ""},
		{"v1.35.01", ""},
		{"v1.35.1-rc.0", ""},
		{"1.35.10", ""},
		{"v1.35.x", ""},
	} {
		got, ok := Resolve(tc.version)
		if got != tc.upstream || ok != (tc.upstream != "") {
			t.Errorf("Resolve(%s) = %q, %v; want %q", tc.version, got, ok, tc.upstream)
		}
		if IsRigger(tc.version) != ok {
			t.Errorf("IsRigger(%s) != Resolve's answer", tc.version)
		}
	}
	// A patch of the rule has its minor's entry's images but its own
	// components.
	entry, _ := Images("v1.35.10-rigger1")
	if im, ok := Images("v1.35.12"); !ok || im != entry {
		t.Errorf("v1.35.12's images differ from its minor's entry")
	}
	if c, _ := Components("v1.35.12"); c[KubeAPIServer] != "registry.k8s.io/kube-apiserver:v1.35.12" || c[Kubelet] != "ghcr.io/siderolabs/kubelet:v1.35.12-fat" {
		t.Errorf("v1.35.12's components: %v", c)
	}
}

func TestRetired(t *testing.T) {
	for version, want := range map[string]string{
		"v1.33.7-rigger1": "v1.33.7 or v1.33.13-rigger1",
		"v1.34.9-rigger1": "v1.34.9-rigger2",
		"v1.37.2-rigger1": "v1.37.2-rigger3",
	} {
		if got, ok := Retired(version); !ok || got != want {
			t.Errorf("Retired(%s) = %q, %v; want %q", version, got, ok, want)
		}
	}
	for _, v := range append(Versions(), "v1.35.12", rkemeta.DefaultVersion) {
		if _, ok := Retired(v); ok {
			t.Errorf("%s is retired", v)
		}
	}
}

func TestEndOfLife(t *testing.T) {
	prev := ""
	for minor := rkemeta.MinMinor; minor <= LastMinor; minor++ {
		d, ok := EndOfLife(minor)
		if !ok || len(d) != len("2027-02-28") || d <= prev {
			t.Errorf("EndOfLife(1.%d) = %q, %v: want a day after 1.%d's %s", minor, d, ok, minor-1, prev)
		}
		prev = d
	}
	if _, ok := EndOfLife(LastMinor + 1); ok {
		t.Errorf("an end of life for 1.%d, which rigger does not run", LastMinor+1)
	}
}

func TestFeatureGates(t *testing.T) {
	for _, g := range FeatureGates() {
		if g.Minor < FirstMinor || g.Minor > LastMinor || g.Gate == "" || g.Why == "" {
			t.Errorf("gate %+v: outside rigger's minors or undocumented", g)
		}
	}
}
