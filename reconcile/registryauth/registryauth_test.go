package registryauth

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rigger/rigger/internal/rkerender"
	"github.com/rigger/rigger/spec"
)

// authOf decodes an X-Registry-Auth value to user:password.
func authOf(t *testing.T, auth string) string {
	t.Helper()
	if auth == "" {
		return ""
	}
	b, err := base64.URLEncoding.DecodeString(auth)
	if err != nil {
		t.Fatalf("X-Registry-Auth %q is not base64url: %v", auth, err)
	}
	var a struct{ Username, Password string }
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("X-Registry-Auth %s: %v", b, err)
	}
	return a.Username + ":" + a.Password
}

var testRegistries = []spec.PrivateRegistry{
	{URL: "registry.internal:5000", User: "ci", Password: "s3cret"},
	{URL: "repo.example/foo/bar", User: "deep", Password: "d33p"},
	{User: "hub", Password: "hubpw"},
	{URL: "quay.io", User: "q", Password: "old"},
	{URL: "quay.io", User: "q", Password: "new"}, // the last of one url counts, as in RKE
}

// testImages are image names as cluster.yml and the add-ons give them.
var testImages = []string{
	"registry.internal:5000/rancher/hyperkube:v1.32.3-rancher1",
	"registry.internal:5000/hyperkube",
	"registry.internal:5000/a/b/c/d@sha256:" + strings.Repeat("0", 64),
	"registry.internal:5001/rancher/hyperkube:v1",
	"registry.internal/rancher/hyperkube:v1",
	"repo.example/foo/bar/rancher/rke-tools:v0.1.51",
	"repo.example/foo/rancher/rke-tools:v0.1.51",
	"repo.example/foo/bar/baz/rancher/rke-tools",
	"repo.example/rancher/rke-tools",
	"rancher/rke-tools:v0.1.111",
	"busybox",
	"docker.io/library/busybox:1.36",
	"index.docker.io/rancher/x",
	"quay.io/coreos/etcd:v3.5",
	"localhost:5000/x",
	"REGISTRY.internal:5000/x",
	"registry.internal:5000/UPPER",
	"",
	"a b",
}

func TestFor(t *testing.T) {
	s := New(testRegistries)
	for _, tc := range []struct {
		image, registry, auth string
		err                   bool
	}{
		{image: "registry.internal:5000/rancher/hyperkube:v1.32.3-rancher1", registry: "registry.internal:5000", auth: "ci:s3cret"},
		{image: "registry.internal:5000/hyperkube", registry: "registry.internal:5000", auth: "ci:s3cret"},
		// Deeper paths are looked up by host and path but the last two.
		{image: "registry.internal:5000/a/b/c/d", registry: ""},
		{image: "repo.example/foo/bar/rancher/rke-tools:v0.1.51", registry: "repo.example/foo/bar", auth: "deep:d33p"},
		{image: "repo.example/foo/rancher/rke-tools:v0.1.51", registry: ""},
		{image: "registry.internal:5001/rancher/hyperkube:v1", registry: ""},
		{image: "rancher/rke-tools:v0.1.111", registry: "docker.io", auth: "hub:hubpw"},
		{image: "busybox", registry: "docker.io", auth: "hub:hubpw"},
		{image: "quay.io/coreos/etcd:v3.5", registry: "quay.io", auth: "q:new"},
		{image: "registry.internal:5000/UPPER", err: true},
	} {
		t.Run(tc.image, func(t *testing.T) {
			p, err := s.For(tc.image)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want error %v", err, tc.err)
			}
			if p.Registry != tc.registry || authOf(t, p.Auth) != tc.auth {
				t.Errorf("registry %q with %q, want %q with %q", p.Registry, authOf(t, p.Auth), tc.registry, tc.auth)
			}
		})
	}
	if p, err := (Set{}).For("busybox"); err != nil || p != (Pull{}) {
		t.Errorf("no registries: %+v, %v; want nothing and no error", p, err)
	}
}

func TestKubeletDockerConfig(t *testing.T) {
	got := string(New([]spec.PrivateRegistry{{URL: "r.example:5000", User: "u", Password: "p"}, {User: "hub", Password: "x"}}).KubeletDockerConfig())
	if want := `{"auths":{"docker.io":{"auth":"aHViOng="},"r.example:5000":{"auth":"dTpw"}}}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if b := (Set{}).KubeletDockerConfig(); b != nil {
		t.Errorf("no registries: %s, want nothing", b)
	}
}

// TestAgainstRKE: for every registry set and image, rigger's choice of
// credentials is RKE v1.8.14's (docker.GetImageRegistryConfig, run by
// hack/rke-render), and so is the kubelet's Docker config
// (docker.GetKubeletDockerConfig).
func TestAgainstRKE(t *testing.T) {
	bin := rkerender.Binary(t)
	type rkeRegistry struct {
		URL      string `json:"url,omitempty"`
		User     string `json:"user,omitempty"`
		Password string `json:"password,omitempty"`
	}
	sets := [][]spec.PrivateRegistry{
		testRegistries,
		{{URL: "registry.internal:5000", User: "only", Password: "one"}},
		{{User: "hub-only", Password: "p"}},
		{{URL: "registry.internal:5000"}}, // no credentials
		nil,
	}
	for i, regs := range sets {
		var q struct {
			Registries []rkeRegistry `json:"registries"`
			Images     []string      `json:"images"`
		}
		for _, r := range regs {
			q.Registries = append(q.Registries, rkeRegistry{r.URL, r.User, r.Password})
		}
		q.Images = testImages
		in, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		var rke struct {
			Pulls []struct {
				Auth, Registry, Error string
			}
			Kubelet string
		}
		if err := json.Unmarshal(rkerender.RunInput(t, bin, in, "-registries"), &rke); err != nil {
			t.Fatal(err)
		}
		if len(rke.Pulls) != len(testImages) {
			t.Fatalf("set %d: RKE answered for %d of %d images", i, len(rke.Pulls), len(testImages))
		}
		s := New(regs)
		for j, image := range testImages {
			p, err := s.For(image)
			if (err != nil) != (rke.Pulls[j].Error != "") {
				t.Errorf("set %d, image %q: rigger's error %v, RKE's %q", i, image, err, rke.Pulls[j].Error)
			}
			if p.Registry != rke.Pulls[j].Registry || p.Auth != rke.Pulls[j].Auth {
				t.Errorf("set %d, image %q: rigger pulls from %q with %q, RKE from %q with %q",
					i, image, p.Registry, authOf(t, p.Auth), rke.Pulls[j].Registry, authOf(t, rke.Pulls[j].Auth))
			}
		}
		if diff := cmp.Diff(rke.Kubelet, string(s.KubeletDockerConfig())); diff != "" {
			t.Errorf("set %d: kubelet's Docker config (-RKE +rigger):\n%s", i, diff)
		}
	}
}
