// Package riggermeta is rigger's own Kubernetes version table past RKE's
// end, kept beside RKE v1.8.14's (package rkemeta), and the lookups that
// answer from both tables:
//
//   - rigger's versions, one per minor version after 1.32 (Versions),
//     spelled v1.33.7-rigger1: the upstream Kubernetes version the
//     kubernetes image runs, then `-rigger` and the revision of the entry;
//   - their images (Images): images a user can pull today, each from a
//     source named in docs/versions.md; an entry whose minor version has no
//     maintained public image with all five components names no kubernetes
//     image, and the cluster must set system_images.kubernetes (recipe in
//     deploy/hyperkube);
//   - their components' default flags (ServiceOptions): RKE's options of
//     1.32 with each flag a later minor version removed taken out and the
//     settings it needs added (RemovedFlags, AddedFlags);
//   - the Docker versions accepted on their nodes: RKE's list of 1.32, as
//     the nodes run the same rke-tools and cri-dockerd (DockerVersions);
//   - the lookups over both tables: AllVersions, AllImages,
//     ServiceOptionsFor, AllDockerVersions, SupportsDocker, which answer
//     exactly as rkemeta's for every version of RKE's table.
//
// Nothing here is generated: rkemeta's files are RKE's and stay as RKE
// wrote them.
package riggermeta

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/rigger/rigger/spec/rkemeta"
)

// Suffix marks rigger's versions: v1.33.7-rigger1.
const Suffix = "-rigger"

// BaseSeries is the series of RKE's table whose default flags and
// version-independent images rigger's entries start from.
const BaseSeries = "v1.32"

// baseVersion is RKE's version whose images rigger's entries keep where
// the minor version does not matter (rke-tools, the CNI plugins, DNS
// autoscaler, nodelocal): RKE v1.8.14's default.
const baseVersion = rkemeta.DefaultVersion

// Images of rigger's entries, each named in docs/versions.md with its
// source.
const (
	// kubeadm's etcd of 1.37 (cmd/kubeadm/app/constants of v1.37.2).
	etcd37 = "registry.k8s.io/etcd:3.7.0-0"
	// etcd 3.6.11, promoted to registry.k8s.io by kubernetes/k8s.io#9429
	// and made kubeadm's etcd of 1.34 to 1.36 by kubernetes#138746; 3.7
	// needs every member on 3.6.11 or later first.
	etcd36 = "registry.k8s.io/etcd:3.6.11-0"
	// etcd 3.5.27, promoted by kubernetes/k8s.io#9119: 3.6 needs every
	// member on 3.5.26 or later first (etcd's zombie-members fix).
	etcd35 = "registry.k8s.io/etcd:3.5.27-0"
	// flannel's own image, the same release RKE's 1.32 mirrors
	// (rancher/mirrored-flannel-flannel:v0.28.1).
	flannel = "ghcr.io/flannel-io/flannel:v0.28.1"
	// metrics-server's own image, the release RKE's 1.32 mirrors
	// (rancher/mirrored-metrics-server:v0.7.2).
	metricsServer = "registry.k8s.io/metrics-server/metrics-server:v0.7.2"
)

// entry is one of rigger's versions with what differs from baseVersion's
// images.
type entry struct {
	version    string
	etcd       string
	kubernetes string // "" where no maintained public image exists
	pause      string // kubeadm's PauseVersion of the minor
	coreDNS    string // kubeadm's CoreDNSVersion of the minor
}

// entries returns rigger's versions, oldest first.
func entries() []entry {
	return []entry{
		{"v1.33.7-rigger1", etcd35, "ghcr.io/cybozu/kubernetes:1.33.7.1", "registry.k8s.io/pause:3.10", "registry.k8s.io/coredns/coredns:v1.12.0"},
		{"v1.34.9-rigger1", etcd36, "ghcr.io/cybozu/kubernetes:1.34.9.1", "registry.k8s.io/pause:3.10.1", "registry.k8s.io/coredns/coredns:v1.12.1"},
		{"v1.35.8-rigger1", etcd36, "ghcr.io/cybozu/kubernetes:1.35.8.1", "registry.k8s.io/pause:3.10.1", "registry.k8s.io/coredns/coredns:v1.13.1"},
		{"v1.36.3-rigger1", etcd36, "", "registry.k8s.io/pause:3.10.2", "registry.k8s.io/coredns/coredns:v1.14.2"},
		{"v1.37.2-rigger1", etcd37, "", "registry.k8s.io/pause:3.10.2", "registry.k8s.io/coredns/coredns:v1.14.6"},
	}
}

// Versions returns rigger's own versions, oldest first.
func Versions() []string {
	es := entries()
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.version
	}
	return out
}

// AllVersions returns RKE's versions (rkemeta.Versions) and then rigger's,
// oldest first.
func AllVersions() []string { return append(rkemeta.Versions(), Versions()...) }

// IsRigger reports whether version is one of rigger's own versions.
func IsRigger(version string) bool {
	return slices.ContainsFunc(entries(), func(e entry) bool { return e.version == version })
}

// Images returns the images of one of rigger's versions, spelled exactly
// as Versions spells it. Its Kubernetes is empty where no public image
// exists (NeedsKubernetesImage).
func Images(version string) (rkemeta.SystemImages, bool) {
	es := entries()
	i := slices.IndexFunc(es, func(e entry) bool { return e.version == version })
	if i < 0 {
		return rkemeta.SystemImages{}, false
	}
	e := es[i]
	im, ok := rkemeta.Images(baseVersion)
	if !ok {
		panic("riggermeta: RKE's table has no " + baseVersion)
	}
	im.Etcd = e.etcd
	im.Kubernetes = e.kubernetes
	im.PodInfraContainer = e.pause
	im.CoreDNS = e.coreDNS
	im.Flannel = flannel
	im.CanalFlannel = flannel
	im.MetricsServer = metricsServer
	// ingress-nginx is retired upstream (March 2026): no image, and
	// validation refuses ingress.provider nginx on these versions.
	im.Ingress, im.IngressBackend, im.IngressWebhook = "", "", ""
	// rigger runs Linux nodes only; RKE's Windows pause image is RKE's.
	im.WindowsPodInfraContainer = ""
	return im, true
}

// AllImages returns the images of a version of either table.
func AllImages(version string) (rkemeta.SystemImages, bool) {
	if im, ok := rkemeta.Images(version); ok {
		return im, true
	}
	return Images(version)
}

// NeedsKubernetesImage reports whether a version is one of rigger's whose
// table names no kubernetes image: the cluster must set
// system_images.kubernetes (deploy/hyperkube builds one).
func NeedsKubernetesImage(version string) bool {
	im, ok := Images(version)
	return ok && im.Kubernetes == ""
}

// Components, named as their containers and binaries.
const (
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubelet               = "kubelet"
	KubeProxy             = "kube-proxy"
)

// RemovedFlag is a flag a Kubernetes minor version no longer accepts: the
// component exits at start with `unknown flag`.
type RemovedFlag struct {
	// Component is the binary (KubeAPIServer, Kubelet, …).
	Component string
	// Flag is the flag's name without dashes.
	Flag string
	// Minor is the 1.x minor version that removed it.
	Minor int
	// Upstream is the change that removed it, or what is known of it.
	Upstream string
	// Instead says what to do instead, for people.
	Instead string
}

// RemovedFlags returns the flags that rigger, RKE's defaults or a user's
// extra_args may pass and that a minor version after 1.32 removed, oldest
// removal first, found by diffing the flags each component registers in
// Kubernetes' sources (docs/versions.md).
func RemovedFlags() []RemovedFlag {
	return []RemovedFlag{
		{KubeAPIServer, "cloud-provider", 33, "kubernetes#130162",
			"the API server has no cloud provider any more: run the cloud's controller manager (cloud_provider.name: external) and leave the flag out"},
		{KubeAPIServer, "cloud-config", 33, "kubernetes#130162",
			"the API server has no cloud provider any more: give the cloud config to the cloud's controller manager and leave the flag out"},
		{Kubelet, "cloud-config", 34, "kubernetes#130161",
			"the kubelet reads no cloud config any more: give it to the cloud's controller manager and leave the flag out"},
		{Kubelet, "register-schedulable", 34, "deprecated before; gone from v1.34.4's kubelet",
			"use register-with-taints (node.kubernetes.io/unschedulable:NoSchedule) or cordon the node instead"},
		{Kubelet, "pod-infra-container-image", 35, "kubernetes#133779",
			"the kubelet takes the sandbox (pause) image from the container runtime: leave the flag out (with enable_cri_dockerd, cri-dockerd then uses its built-in default, as rke-tools' entrypoint reads the image from this flag only)"},
	}
}

// Removed returns the removal of a component's flag at a 1.x minor
// version, if that minor version or an earlier one removed it.
func Removed(component, flag string, minor int) (RemovedFlag, bool) {
	for _, r := range RemovedFlags() {
		if r.Component == component && r.Flag == flag && minor >= r.Minor {
			return r, true
		}
	}
	return RemovedFlag{}, false
}

// AddedFlag is a default flag rigger adds from a minor version on, to keep
// what RKE's 1.32 options did.
type AddedFlag struct {
	Component, Flag, Value string
	// Minor is the 1.x minor version from which it is passed.
	Minor int
	// Why, for people.
	Why string
}

// AddedFlags returns the flags rigger's entries add to RKE's 1.32 options.
func AddedFlags() []AddedFlag {
	return []AddedFlag{
		{Kubelet, "fail-cgroupv1", "false", 35,
			"from 1.35 the kubelet refuses to start on a cgroup v1 host unless told otherwise (kubernetes#134298); RKE's nodes may be cgroup v1, so rigger keeps them running, as 1.32 did. cgroup v1 is deprecated: move the nodes to cgroup v2 and set it to true in extra_args"},
	}
}

// FirstMinor and LastMinor are the 1.x minor versions of rigger's entries.
const (
	FirstMinor = 33
	LastMinor  = 37
)

// ServiceOptions returns the default flags of a series of rigger's
// (v1.33 … v1.37): RKE's options of BaseSeries without the flags that
// minor version removed, with the flags it adds.
func ServiceOptions(series string) (rkemeta.Options, bool) {
	minor, ok := seriesMinor(series)
	if !ok || minor < FirstMinor || minor > LastMinor {
		return rkemeta.Options{}, false
	}
	base, ok := rkemeta.ServiceOptions(BaseSeries)
	if !ok {
		panic("riggermeta: RKE's table has no options for " + BaseSeries)
	}
	o := rkemeta.Options{
		Etcd:           maps.Clone(base.Etcd),
		KubeAPI:        maps.Clone(base.KubeAPI),
		KubeController: maps.Clone(base.KubeController),
		Scheduler:      maps.Clone(base.Scheduler),
		Kubelet:        maps.Clone(base.Kubelet),
		Kubeproxy:      maps.Clone(base.Kubeproxy),
	}
	byComponent := map[string]map[string]string{
		KubeAPIServer:         o.KubeAPI,
		KubeControllerManager: o.KubeController,
		KubeScheduler:         o.Scheduler,
		Kubelet:               o.Kubelet,
		KubeProxy:             o.Kubeproxy,
	}
	for _, r := range RemovedFlags() {
		if minor >= r.Minor {
			delete(byComponent[r.Component], r.Flag)
		}
	}
	for _, a := range AddedFlags() {
		if minor >= a.Minor {
			byComponent[a.Component][a.Flag] = a.Value
		}
	}
	return o, true
}

// ServiceOptionsFor is rkemeta.ServiceOptionsFor over both tables: RKE's
// answer whenever RKE has one, so that nothing changes for a version of
// RKE's table; else the options of rigger's series, found by the tag of the
// kubernetes image first (v1.36.3 and CKE's 1.33.7.1 both say their
// series) and by kubernetes_version otherwise. The key returned is the
// series, with its v (v1.33).
func ServiceOptionsFor(clusterVersion, kubernetesImage string) (rkemeta.Options, string, error) {
	o, key, err := rkemeta.ServiceOptionsFor(clusterVersion, kubernetesImage)
	if err == nil {
		return o, key, nil
	}
	series := normalSeries(clusterVersion)
	if s := normalSeries(rkemeta.ImageTag(kubernetesImage)); s != "" {
		series = s
	}
	if o, ok := ServiceOptions(series); ok {
		return o, series, nil
	}
	if series == "" {
		series = key
	}
	return rkemeta.Options{}, series, fmt.Errorf("no service options for Kubernetes version %s or series %s", clusterVersion, series)
}

// normalSeries is rkemeta.Series with a leading v, for tags written
// without one (CKE's 1.33.7.1 → v1.33); "" when the tag has no major and
// minor number.
func normalSeries(tag string) string {
	s := rkemeta.Series(tag)
	if s == "" {
		return ""
	}
	if !strings.HasPrefix(s, "v") {
		s = "v" + s
	}
	if _, ok := seriesMinor(s); !ok {
		return ""
	}
	return s
}

// seriesMinor reads the minor version of v1.33 (1.x only).
func seriesMinor(series string) (int, bool) {
	major, minor, ok := strings.Cut(strings.TrimPrefix(series, "v"), ".")
	if !ok || major != "1" {
		return 0, false
	}
	n, err := strconv.Atoi(minor)
	return n, err == nil
}

// DockerVersions returns the Docker versions accepted on the nodes of a
// cluster of kubernetes_version k8sVersion: RKE's list for a minor version
// of RKE's table, and RKE's list of BaseSeries for rigger's minor versions
// (the nodes run the same rke-tools and cri-dockerd as 1.32's).
func DockerVersions(k8sVersion string) []string {
	if v := rkemeta.DockerVersions(k8sVersion); v != nil {
		return v
	}
	if m, ok := seriesMinor(normalSeries(k8sVersion)); ok && m >= FirstMinor && m <= LastMinor {
		return rkemeta.DockerVersions(BaseSeries + ".0")
	}
	return nil
}

// SupportsDocker is rkemeta.SupportsDocker, with DockerVersions' list for
// rigger's minor versions.
func SupportsDocker(k8sVersion, dockerVersion string) (bool, error) {
	if rkemeta.DockerVersions(k8sVersion) == nil {
		if m, ok := seriesMinor(normalSeries(k8sVersion)); ok && m >= FirstMinor && m <= LastMinor {
			k8sVersion = BaseSeries + ".0"
		}
	}
	return rkemeta.SupportsDocker(k8sVersion, dockerVersion)
}
