// Package riggermeta is rigger's own Kubernetes version table past RKE's
// end, kept beside RKE v1.8.14's (package rkemeta), and the lookups that
// answer from both tables:
//
//   - rigger's versions, one per minor version after 1.32 (Versions),
//     spelled v1.35.10-rigger1: upstream's newest patch release of the
//     minor when the table was written, then `-rigger` and the revision of
//     the entry; any other patch release of those minor versions, spelled
//     as upstream spells it (v1.35.12), is rigger's too, its images derived
//     by the same rule (Resolve);
//   - their images (Images, Components): upstream's own images of the
//     control-plane components and kube-proxy (registry.k8s.io), Talos'
//     image of upstream's kubelet binary (ghcr.io/siderolabs/kubelet), and
//     etcd, pause and CoreDNS as kubeadm pairs them with each minor, each
//     source named in docs/versions.md; system_images.kubernetes stays
//     empty, and a cluster that sets it runs that one image for all five,
//     as in RKE;
//   - upstream's end of life of each minor version (EndOfLife);
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
	"strconv"
	"strings"

	"github.com/rigger/rigger/spec/rkemeta"
)

// Suffix marks rigger's versions: v1.35.10-rigger1.
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
	// kubeadm's etcd of 1.37 (cmd/kubeadm/app/constants of v1.37.2). A
	// member moved to it from 3.6 before it saved a snapshot of its log
	// since the cluster left 3.5 crash-loops (etcd 3.7 cannot apply the v2
	// entries 3.5 wrote): rigger makes every member save one first
	// (etcdmember.SnapshotLogs, docs/versions.md).
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

// Where the components' images come from (docs/versions.md).
const (
	// UpstreamRegistry publishes, signed, kube-apiserver,
	// kube-controller-manager, kube-scheduler and kube-proxy for every
	// patch release: registry.k8s.io/<component>:v1.35.10.
	UpstreamRegistry = "registry.k8s.io"
	// KubeletRepository is Talos' image of upstream's kubelet binary
	// (upstream publishes no kubelet image): its -fat variant, on
	// Kubernetes' debian-base, has the shell, mount, nsenter, iptables and
	// nftables that rke-tools' kubelet entrypoint and the kubelet run.
	KubeletRepository = "ghcr.io/siderolabs/kubelet"
	// KubeletVariant is the tag suffix of that variant.
	KubeletVariant = "-fat"
)

// minorEntry is one minor version of rigger's table.
type minorEntry struct {
	minor int
	// patch is upstream's newest patch release of the minor when the
	// table was written: the entry's version.
	patch int
	// revision is rigger's revision of the entry: a change of its images
	// other than the patch release gets the next one.
	revision int
	etcd     string
	pause    string // kubeadm's PauseVersion of the minor
	coreDNS  string // kubeadm's CoreDNSVersion of the minor
}

// entries returns rigger's minor versions, oldest first.
func entries() []minorEntry {
	return []minorEntry{
		{33, 13, 1, etcd35, "registry.k8s.io/pause:3.10", "registry.k8s.io/coredns/coredns:v1.12.0"},
		{34, 9, 2, etcd36, "registry.k8s.io/pause:3.10.1", "registry.k8s.io/coredns/coredns:v1.12.1"},
		{35, 10, 1, etcd36, "registry.k8s.io/pause:3.10.1", "registry.k8s.io/coredns/coredns:v1.13.1"},
		{36, 6, 1, etcd36, "registry.k8s.io/pause:3.10.2", "registry.k8s.io/coredns/coredns:v1.14.2"},
		{37, 2, 3, etcd37, "registry.k8s.io/pause:3.10.2", "registry.k8s.io/coredns/coredns:v1.14.6"},
	}
}

// upstream is the entry's upstream version: v1.35.10.
func (e minorEntry) upstream() string { return fmt.Sprintf("v1.%d.%d", e.minor, e.patch) }

// version is the entry's spelling in the table: v1.35.10-rigger1.
func (e minorEntry) version() string { return e.upstream() + Suffix + strconv.Itoa(e.revision) }

// retired are the spellings earlier tables gave, with the image each named
// for kubernetes, so that a cluster.yml still naming one is told what
// replaced it (Retired).
var retired = map[string]string{
	"v1.33.7-rigger1": "ghcr.io/cybozu/kubernetes:1.33.7.1",
	"v1.34.9-rigger1": "ghcr.io/cybozu/kubernetes:1.34.9.1",
	"v1.35.8-rigger1": "ghcr.io/cybozu/kubernetes:1.35.8.1",
	"v1.36.3-rigger1": "",
	"v1.37.2-rigger1": "",
	"v1.37.2-rigger2": "",
}

// Retired reports whether version is a spelling an earlier table of
// rigger's gave, and what to write instead: the upstream version it ran
// (whose images the rule now derives) and the table's entry of its minor.
func Retired(version string) (instead string, ok bool) {
	if _, ok := retired[version]; !ok {
		return "", false
	}
	upstream, _, _ := strings.Cut(version, Suffix)
	for _, e := range entries() {
		if strings.HasPrefix(upstream, fmt.Sprintf("v1.%d.", e.minor)) {
			if e.upstream() == upstream {
				return e.version(), true
			}
			return upstream + " or " + e.version(), true
		}
	}
	return upstream, true
}

// Versions returns rigger's own versions, oldest first.
func Versions() []string {
	es := entries()
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.version()
	}
	return out
}

// AllVersions returns RKE's versions (rkemeta.Versions) and then rigger's,
// oldest first.
func AllVersions() []string { return append(rkemeta.Versions(), Versions()...) }

// Resolve finds a kubernetes_version in rigger's table: an entry as the
// table spells it (v1.35.10-rigger1), or any patch release of one of the
// table's minor versions as upstream spells it (v1.35.12, v1.35.3), so that
// a patch upstream publishes after rigger's release runs without a new
// rigger. It returns the upstream version the components run (v1.35.10).
func Resolve(version string) (upstream string, ok bool) {
	_, upstream, ok = resolve(version)
	return upstream, ok
}

func resolve(version string) (minorEntry, string, bool) {
	for _, e := range entries() {
		if e.version() == version {
			return e, e.upstream(), true
		}
	}
	major, rest, ok := strings.Cut(version, ".")
	if !ok || major != "v1" {
		return minorEntry{}, "", false
	}
	minor, patch, ok := strings.Cut(rest, ".")
	if !ok || !decimal(minor) || !decimal(patch) {
		return minorEntry{}, "", false
	}
	for _, e := range entries() {
		if strconv.Itoa(e.minor) == minor {
			return e, version, true
		}
	}
	return minorEntry{}, "", false
}

// decimal reports whether s is a number as semver writes one: digits, no
// leading zero.
func decimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	return strings.Trim(s, "0123456789") == ""
}

// IsRigger reports whether version is one of rigger's own versions, an
// entry of the table or a patch release of one of its minor versions.
func IsRigger(version string) bool {
	_, ok := Resolve(version)
	return ok
}

// Images returns the images of one of rigger's versions (Resolve). Its
// Kubernetes is empty: each component has an image of its own
// (Components).
func Images(version string) (rkemeta.SystemImages, bool) {
	e, _, ok := resolve(version)
	if !ok {
		return rkemeta.SystemImages{}, false
	}
	im, ok := rkemeta.Images(baseVersion)
	if !ok {
		panic("riggermeta: RKE's table has no " + baseVersion)
	}
	im.Etcd = e.etcd
	im.Kubernetes = ""
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

// ComponentImages are the images of the five Kubernetes components, by
// component name (KubeAPIServer, …).
type ComponentImages map[string]string

// Components returns the image of each Kubernetes component of one of
// rigger's versions (Resolve): upstream's images of its patch release for
// all but the kubelet, Talos' for the kubelet.
func Components(version string) (ComponentImages, bool) {
	upstream, ok := Resolve(version)
	if !ok {
		return nil, false
	}
	out := ComponentImages{Kubelet: KubeletRepository + ":" + upstream + KubeletVariant}
	for _, c := range []string{KubeAPIServer, KubeControllerManager, KubeScheduler, KubeProxy} {
		out[c] = UpstreamRegistry + "/" + c + ":" + upstream
	}
	return out, true
}

// AllImages returns the images of a version of either table.
func AllImages(version string) (rkemeta.SystemImages, bool) {
	if im, ok := rkemeta.Images(version); ok {
		return im, true
	}
	return Images(version)
}

// EndOfLife returns the day upstream ended, or ends, the support of a 1.x
// minor version (kubernetes.io/releases/patch-releases), YYYY-MM-DD, for
// the minor versions rigger runs.
func EndOfLife(minor int) (string, bool) {
	d, ok := map[int]string{
		24: "2023-07-28", 25: "2023-10-28", 26: "2024-02-28", 27: "2024-06-28",
		28: "2024-10-28", 29: "2025-02-28", 30: "2025-06-28", 31: "2025-10-28",
		32: "2026-02-28", 33: "2026-06-28", 34: "2026-10-27", 35: "2027-02-28",
		36: "2027-06-28", 37: "2027-10-28",
	}[minor]
	return d, ok
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

// FeatureGate is a feature gate rigger sets on a component from a minor
// version on, merged into its --feature-gates unless the cluster's
// extra_args name the gate themselves.
type FeatureGate struct {
	Component, Gate string
	Enabled         bool
	// Minor is the 1.x minor version from which it is set.
	Minor int
	// Why, for people.
	Why string
}

// FeatureGates returns the gates rigger sets past RKE's table.
func FeatureGates() []FeatureGate {
	return []FeatureGate{
		{KubeAPIServer, "ExtendWebSocketsToKubelet", false, 36,
			"from 1.36 the API server forwards kubectl exec, attach and port-forward to the kubelet over WebSockets by default, which cri-dockerd's streaming server does not serve (\"server gave HTTP response to HTTPS client\", Mirantis/cri-dockerd#576): turning the gate off keeps them working through cri-dockerd"},
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
