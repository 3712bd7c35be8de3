// Package rkemeta is RKE's Kubernetes metadata (kontainer-driver-metadata,
// KDM) as RKE v1.8.14 embeds it in data/data.json, and the lookups RKE
// makes in it, answering as RKE answers:
//
//   - the Kubernetes versions RKE knows from 1.24 on (Versions), each with
//     exactly RKE's images (Images), and RKE's default version (Default);
//   - RKE's version info of each version and series (Info: deprecation,
//     lowest and highest RKE release);
//   - the Docker versions RKE accepts for each Kubernetes minor version
//     (DockerVersions), and RKE's check of a node's Docker version against
//     them (SupportsDocker);
//   - the default flags of each component by version or series
//     (ServiceOptions; ServiceOptionsFor picks them the way RKE does,
//     giving the kubernetes image's tag precedence over kubernetes_version);
//   - the add-on templates (Template: RKE's semver range table of every
//     add-on, whole, and the template texts that versions from 1.24 on can
//     reach).
//
// Everything older than Kubernetes 1.24 is left out: rigger runs nothing
// older (dockershim is gone from 1.24 on). The range table is kept whole so
// that Template answers as RKE's templates.getTemplate for any version; a
// range that can only match versions before 1.24 names a template whose
// text is not kept, and Template says so.
//
// zz_generated.go and templates/ are written by hack/rke-metadata from the
// RKE module in the Go module cache (`go generate ./spec/rkemeta`);
// TestGeneratedUpToDate checks them. RKE is Apache-2.0; RKE itself is never
// a dependency of rigger's module.
package rkemeta

//go:generate go run ../../hack/rke-metadata -out .

import (
	"compress/gzip"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/blang/semver"
	gosemver "github.com/coreos/go-semver/semver"
)

// templates is the template texts kept, one gzip-compressed file per key
// (templates/KEY.gz): a command decompresses only those it renders.
//
//go:embed templates
var templates embed.FS

// templateCache keeps the texts read, by key; they are never changed.
var templateCache sync.Map

// templateText is the text of template key, and whether rigger keeps it.
func templateText(key string) (text string, ok bool, err error) {
	if t, ok := templateCache.Load(key); ok {
		return t.(string), true, nil
	}
	f, err := templates.Open("templates/" + key + ".gz")
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", false, fmt.Errorf("read rigger's add-on template %s: %w", key, err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return "", false, fmt.Errorf("read rigger's add-on template %s: %w", key, err)
	}
	templateCache.Store(key, string(b))
	return string(b), true, nil
}

// release is one version of RKE's K8sVersionRKESystemImages.
type release struct {
	version string
	images  SystemImages
}

// Options is RKE's KubernetesServicesOptions: the default flags of
// each component, flag name (without dashes) to value. An empty value means
// that the flag is not passed at all (RKE deletes it from the command line).
type Options struct {
	Etcd           map[string]string `json:"etcd,omitempty"`
	KubeAPI        map[string]string `json:"kubeapi,omitempty"`
	KubeController map[string]string `json:"kubeController,omitempty"`
	Scheduler      map[string]string `json:"scheduler,omitempty"`
	Kubelet        map[string]string `json:"kubelet,omitempty"`
	Kubeproxy      map[string]string `json:"kubeproxy,omitempty"`
}

// VersionInfo is RKE's K8sVersionInfo of a version or a series: the RKE
// and Rancher releases that offer it. Empty fields are not set in RKE's data.
type VersionInfo struct {
	// MinRKEVersion is the first RKE release that offers the version.
	MinRKEVersion string `json:"minRKEVersion,omitempty"`
	// MaxRKEVersion is the last RKE release that offers the series as current.
	MaxRKEVersion string `json:"maxRKEVersion,omitempty"`
	// DeprecateRKEVersion is the RKE release from which the version is refused.
	DeprecateRKEVersion     string `json:"deprecateRKEVersion,omitempty"`
	MinRancherVersion       string `json:"minRancherVersion,omitempty"`
	MaxRancherVersion       string `json:"maxRancherVersion,omitempty"`
	DeprecateRancherVersion string `json:"deprecateRancherVersion,omitempty"`
}

// Versions returns every Kubernetes version RKE knows from 1.24 on, in
// RKE's spelling (v1.31.5-rancher1-1), oldest first.
func Versions() []string {
	rs := releases()
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.version
	}
	return out
}

// Default is RKE's default kubernetes_version, DefaultVersion.
func Default() string { return DefaultVersion }

// Images returns RKE's images of version, which must be spelled exactly as
// RKE spells it: RKE looks the version up as it is written
// (K8sVersionToRKESystemImages[kubernetes_version]).
func Images(version string) (SystemImages, bool) {
	for _, r := range releases() {
		if r.version == version {
			return r.images, true
		}
	}
	return SystemImages{}, false
}

// Info returns RKE's version info of a version (v1.31.5-rancher1-1) or a
// series (v1.31), as RKE's data writes the key.
func Info(key string) (VersionInfo, bool) {
	i, ok := versionInfo()[key]
	return i, ok
}

// DockerVersions returns the Docker versions RKE accepts on the nodes of a
// cluster of kubernetes_version k8sVersion (`20.10.x`, …), found by its
// major.minor as RKE does; nil for a version it has none for.
func DockerVersions(k8sVersion string) []string {
	key, err := dockerKey(k8sVersion)
	if err != nil {
		return nil
	}
	return dockerVersions()[key]
}

// dockerKey is the key of a kubernetes_version in RKE's
// K8sVersionDockerInfo, found as RKE's checkDockerVersion finds it: the
// version without its `v` read by coreos/go-semver (util.StrToSemVer),
// then major.minor.
func dockerKey(k8sVersion string) (string, error) {
	v, err := gosemver.NewVersion(strings.TrimPrefix(k8sVersion, "v"))
	if err != nil {
		return "", fmt.Errorf("parse kubernetes_version %q: %w", k8sVersion, err)
	}
	return fmt.Sprintf("%d.%d", v.Major, v.Minor), nil
}

// SupportsDocker is RKE's check of a node's Docker engine
// (docker.IsSupportedDockerVersion, which `rke up` makes unless
// ignore_docker_version): whether the engine's version dockerVersion (its
// ServerVersion, `20.10.24+dfsg1`) has the major and minor version of one
// of DockerVersions(k8sVersion). The engine's version and the entries of
// the list (`20.10.x`, read as 20.10.0) are read by coreos/go-semver as RKE
// reads them: the patch version, pre-release and build metadata play no
// part, and leading zeros are allowed (`17.03.2-ce` is 17.3). A version
// that does not parse is an error, as in RKE. For a Kubernetes minor
// version RKE's list has no entry for, no Docker version is supported.
func SupportsDocker(k8sVersion, dockerVersion string) (bool, error) {
	key, err := dockerKey(k8sVersion)
	if err != nil {
		return false, err
	}
	dv, err := gosemver.NewVersion(dockerVersion)
	if err != nil {
		return false, fmt.Errorf("the Docker version %q is not a semantic version: %w", dockerVersion, err)
	}
	for _, s := range dockerVersions()[key] {
		// RKE's convertToSemver: x.y.<anything> is x.y.0.
		parts := strings.SplitN(s, ".", 3)
		if len(parts) != 3 {
			return false, fmt.Errorf("supported Docker version %q of RKE's metadata is not x.y.z", s)
		}
		sv, err := gosemver.NewVersion(parts[0] + "." + parts[1] + ".0")
		if err != nil {
			return false, fmt.Errorf("supported Docker version %q of RKE's metadata: %w", s, err)
		}
		if dv.Major == sv.Major && dv.Minor == sv.Minor {
			return true, nil
		}
	}
	return false, nil
}

// ServiceOptions returns RKE's default service options of a version: those
// of the version itself when RKE's data has them, else those of its series
// (v1.31.5-rancher1-1 → v1.31), as RKE looks them up.
func ServiceOptions(version string) (Options, bool) {
	all := serviceOptions()
	if o, ok := all[version]; ok {
		return o, true
	}
	o, ok := all[Series(version)]
	return o, ok
}

// ServiceOptionsFor returns the default service options RKE uses for a
// cluster of kubernetes_version clusterVersion whose system_images.kubernetes
// is kubernetesImage, and the key it found them under. As RKE's
// getDefaultKubernetesServicesOptions: the version's own options first;
// otherwise the series of the image's tag when it has one (the image wins
// over kubernetes_version), else the series of clusterVersion.
func ServiceOptionsFor(clusterVersion, kubernetesImage string) (Options, string, error) {
	all := serviceOptions()
	if o, ok := all[clusterVersion]; ok {
		return o, clusterVersion, nil
	}
	series := Series(clusterVersion)
	if s := Series(ImageTag(kubernetesImage)); s != "" {
		series = s
	}
	if o, ok := all[series]; ok {
		return o, series, nil
	}
	return Options{}, series, fmt.Errorf("no service options for Kubernetes version %s or series %s", clusterVersion, series)
}

// Series is RKE's util.GetTagMajorVersion: the first two dot-separated
// parts of a version or image tag (v1.31.5-rancher1-1 → v1.31), or "" when
// it has fewer.
func Series(tag string) string {
	parts := strings.Split(tag, ".")
	if len(parts) < 2 {
		return ""
	}
	return strings.Join(parts[:2], ".")
}

// ImageTag returns the tag of an image reference (registry:5000/a/b:tag@digest
// → tag), or "" when it has none.
func ImageTag(image string) string {
	if i := strings.IndexByte(image, '@'); i >= 0 {
		image = image[:i]
	}
	i := strings.LastIndexByte(image, ':')
	if i < 0 || strings.ContainsRune(image[i:], '/') {
		return ""
	}
	return image[i+1:]
}

// Addons whose templates RKE's data holds, by their key in the data.
const (
	AddonACI           = "aci"
	AddonCalico        = "calico"
	AddonCanal         = "canal"
	AddonCoreDNS       = "coreDNS"
	AddonFlannel       = "flannel"
	AddonKubeDNS       = "kubeDNS"
	AddonMetricsServer = "metricsServer"
	AddonNginxIngress  = "nginxIngress"
	AddonNodelocal     = "nodelocal"
	AddonWeave         = "weave"
)

// Addons lists the add-ons of the range table.
func Addons() []string {
	out := make([]string, 0, len(templateRanges()))
	for a := range templateRanges() {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// Template returns the template of an add-on for a Kubernetes version: its
// key and its text. It answers as RKE's templates.getTemplate: the version
// is read as semver after its first character (the `v`), each range of the
// add-on is parsed with blang/semver (a range that does not parse is
// skipped) and the template of the range that matches is returned. When
// the matching template is one rigger does not keep (reachable only from
// versions before 1.24), the key is returned with an error.
func Template(addon, k8sVersion string) (key, text string, err error) {
	if k8sVersion == "" {
		return "", "", fmt.Errorf("k8sVersion not sem-ver %q", k8sVersion)
	}
	toMatch, err := semver.Make(k8sVersion[1:])
	if err != nil {
		return "", "", fmt.Errorf("k8sVersion not sem-ver %s %v", k8sVersion, err)
	}
	ranges := templateRanges()[addon]
	keys := make([]string, 0, len(ranges))
	for r := range ranges {
		keys = append(keys, r)
	}
	slices.Sort(keys) // hack/rke-metadata checks that at most one range matches any version
	for _, r := range keys {
		fn, err := semver.ParseRange(r)
		if err != nil {
			continue
		}
		if fn(toMatch) {
			key = ranges[r]
			text, ok, err := templateText(key)
			if err != nil {
				return key, "", err
			}
			if !ok {
				return key, "", fmt.Errorf("%s template %s for k8sVersion %s is not kept by rigger: it serves Kubernetes before v1.%d only", addon, key, k8sVersion, MinMinor)
			}
			return key, text, nil
		}
	}
	return "", "", fmt.Errorf("no %s template found for k8sVersion %s", addon, k8sVersion)
}

// MatchRange is RKE's util.SemVerMatchRange: whether a kubernetes_version
// (v1.27.0-rancher1-1) lies in a blang/semver range (">=1.27.0-rancher0").
func MatchRange(k8sVersion, versionRange string) (bool, error) {
	if k8sVersion == "" {
		return false, fmt.Errorf("Cluster version has zero length")
	}
	toMatch, err := semver.Make(k8sVersion[1:])
	if err != nil {
		return false, fmt.Errorf("Cluster version [%s] can not be parsed as semver: %v", k8sVersion, err)
	}
	fn, err := semver.ParseRange(versionRange)
	if err != nil {
		return false, fmt.Errorf("Failed to parse semver range [%s]: %v", versionRange, err)
	}
	return fn(toMatch), nil
}

// ParseVersion is RKE's getClusterVersion: a kubernetes_version is `v`
// followed by a semantic version (v1.31.5, v1.31.5-rancher1-1).
func ParseVersion(version string) (semver.Version, error) {
	if len(version) <= 1 || !strings.HasPrefix(version, "v") {
		return semver.Version{}, fmt.Errorf("%s is not valid version", version)
	}
	v, err := semver.Parse(version[1:])
	if err != nil {
		return semver.Version{}, fmt.Errorf("%s is not valid semver", version)
	}
	return v, nil
}

// FlannelHasBlackholeRoute is RKE v1.8.14's blackholeCompatibleToFlannelVersion:
// whether canal's flannel image can add a blackhole route for the node's
// pod range (flannel v0.28.1 and later). The tag is what follows the last
// `:` of the image, read without a leading `v`; a tag that is no semantic
// version (`latest`, or a registry port when the image has no tag) counts
// as able, as in RKE, and an empty image as not.
func FlannelHasBlackholeRoute(image string) bool {
	if image == "" {
		return false
	}
	tag := image[strings.LastIndex(image, ":")+1:]
	v, err := semver.Make(strings.TrimPrefix(tag, "v"))
	if err != nil {
		return true
	}
	return v.GTE(semver.MustParse("0.28.1-0"))
}

// ExtendedLifeNamespace is the image namespace of RKE's extended life: RKE
// v1.8.14's table names the kubernetes image of its newest versions (from
// v1.31.11 and v1.32.7 on) there, as rke-extended-life/hyperkube:…. SUSE
// Rancher serves these images to its subscribers only.
const ExtendedLifeNamespace = "rke-extended-life"

// IsExtendedLifeImage reports whether an image is in RKE's extended-life
// namespace, whatever registry it is pulled from
// (rke-extended-life/hyperkube:v1.32.13-rancher1,
// registry.internal:5000/rke-extended-life/hyperkube:v1.32.13-rancher1).
func IsExtendedLifeImage(image string) bool {
	name, _, _ := strings.Cut(image, "@")
	parts := strings.Split(name, "/")
	return slices.Contains(parts[:len(parts)-1], ExtendedLifeNamespace)
}

// ExtendedLife reports whether a version of the table has an image in RKE's
// extended-life namespace.
func ExtendedLife(version string) bool {
	im, ok := Images(version)
	if !ok {
		return false
	}
	v := reflect.ValueOf(im)
	for i := range v.NumField() {
		if IsExtendedLifeImage(v.Field(i).String()) {
			return true
		}
	}
	return false
}
