package sandbox

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Versions of Kubernetes and etcd the sandbox builds by default: RKE
// v1.8.14's default Kubernetes, and the etcd RKE pairs with it
// (rancher/mirrored-coreos-etcd:v3.5.16).
const (
	// KubernetesVersion is the version of the default hyperkube image, as
	// pinned in hack/kube-build/<version>/go.mod.
	KubernetesVersion = "v1.32.13"
	// EtcdVersion is the version of the default etcd image, as pinned in
	// hack/etcd-build/<version>/go.mod.
	EtcdVersion = "v3.5.16"
)

// KubeRelease is a Kubernetes version the sandbox can build and the etcd
// version that goes with it.
type KubeRelease struct {
	Kubernetes string
	Etcd       string
}

// kubeReleases are the Kubernetes versions the sandbox can build: the
// default first, then the upgrade targets past RKE, one minor at a time.
// The etcd of 1.33 is a 3.5 release at 3.5.26 or later, so that every member
// runs one before 1.34's etcd 3.6 (etcd's rule for an upgrade to 3.6), as
// rigger's table pairs them.
var kubeReleases = []KubeRelease{
	{Kubernetes: KubernetesVersion, Etcd: EtcdVersion},
	{Kubernetes: "v1.33.13", Etcd: "v3.5.35"},
	{Kubernetes: "v1.34.4", Etcd: "v3.6.16"},
	{Kubernetes: "v1.35.4", Etcd: "v3.6.16"},
	{Kubernetes: "v1.36.3", Etcd: "v3.6.16"},
	{Kubernetes: "v1.37.2", Etcd: "v3.7.3"},
}

// KubeReleases lists the Kubernetes versions the sandbox can build, with
// their etcd, the default (KubernetesVersion) first.
func KubeReleases() []KubeRelease { return slices.Clone(kubeReleases) }

// Release returns the sandbox's release of Kubernetes version k
// ("v1.33.13"; an RKE suffix such as "-rancher1-1" is ignored).
func Release(k string) (KubeRelease, error) {
	k, _, _ = strings.Cut(k, "-")
	for _, r := range kubeReleases {
		if r.Kubernetes == k {
			return r, nil
		}
	}
	known := make([]string, len(kubeReleases))
	for i, r := range kubeReleases {
		known[i] = r.Kubernetes
	}
	return KubeRelease{}, fmt.Errorf("the sandbox builds no Kubernetes %s: it builds %s", k, strings.Join(known, ", "))
}

// HyperkubeRef is the ref of the hyperkube image of Kubernetes version k.
func HyperkubeRef(k string) string { return hyperkubeRepo + ":" + k }

// EtcdRef is the ref of the etcd image of etcd version e.
func EtcdRef(e string) string { return etcdImageRepo + ":" + e }

// VersionImages returns the system_images entries that make a cluster.yml
// run Kubernetes version k on the sandbox's images: {"kubernetes":
// hyperkube, "etcd": etcd}. Every other image is the same for every
// version (Sandbox.SystemImages). The images are in the nodes when k is
// the default or was asked for in Options.KubernetesVersions.
func VersionImages(k string) (map[string]string, error) {
	r, err := Release(k)
	if err != nil {
		return nil, err
	}
	return map[string]string{"kubernetes": HyperkubeRef(r.Kubernetes), "etcd": EtcdRef(r.Etcd)}, nil
}

// releasesToBuild is the default release and the ones asked for, each
// once, in the order of kubeReleases.
func releasesToBuild(asked []string) ([]KubeRelease, error) {
	want := map[string]bool{KubernetesVersion: true}
	for _, k := range asked {
		r, err := Release(k)
		if err != nil {
			return nil, err
		}
		want[r.Kubernetes] = true
	}
	var out []KubeRelease
	for _, r := range kubeReleases {
		if want[r.Kubernetes] {
			out = append(out, r)
		}
	}
	return out, nil
}

// KubeBinaries returns the cache directory (opts.CacheDir, else
// $RIGGER_CACHE, else /var/cache/rigger) that holds the Kubernetes
// binaries of version k, and whether they were built there: `rigger
// sandbox images` builds the default's, --kubernetes the others'.
func KubeBinaries(opts Options, k string) (dir string, built bool) {
	dir = filepath.Join(opts.cacheDir(), kubeBuild(k).cacheSub, k)
	return dir, complete(dir)
}

// EtcdBinaries returns the cache directory that holds etcd, etcdctl and
// etcdutl of etcd version e (a KubeRelease's Etcd), and whether they were
// built there.
func EtcdBinaries(opts Options, e string) (dir string, built bool) {
	dir = filepath.Join(opts.cacheDir(), etcdBuild(e).cacheSub, e)
	return dir, complete(dir)
}
