package plan

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/blang/semver"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// kubeComponents are the containers that run Kubernetes itself, whose
// image's tag says the Kubernetes version (rancher/hyperkube:v1.32.3-rancher1).
var kubeComponents = []string{desired.KubeAPIServer, desired.KubeControllerManager, desired.KubeScheduler, desired.Kubelet, desired.KubeProxy}

// Downgrade is one Kubernetes container that cluster.yml would move to an
// older minor version than the one it runs.
type Downgrade struct {
	Node, Component string
	// Running and Wanted are the versions of the observed and the desired
	// image (their tags).
	Running, Wanted string
}

// DowngradeError refuses a plan that downgrades Kubernetes: Kubernetes
// does not support going back to an older minor version (the newer API
// server may have stored objects in versions the older one cannot read,
// and it does not convert them back).
type DowngradeError struct {
	Downgrades []Downgrade
}

func (e *DowngradeError) Error() string {
	var each []string
	newest := ""
	for _, d := range e.Downgrades {
		each = append(each, fmt.Sprintf("%s on %s runs %s, cluster.yml asks for %s", d.Component, d.Node, d.Running, d.Wanted))
		if newest == "" || minorOf(d.Running) > minorOf(newest) {
			newest = d.Running
		}
	}
	return fmt.Sprintf("cluster.yml would downgrade Kubernetes (%s): Kubernetes does not support going back to an older minor version, "+
		"whose API server may not read what the newer one stored. Set kubernetes_version (and system_images.kubernetes, if set) to %s or later, "+
		"the version the cluster runs", strings.Join(each, "; "), rkemeta.Series(newest))
}

// CheckDowngrade returns a *DowngradeError when d would run a Kubernetes
// container of a node of o on an older minor version than the one it runs
// there, comparing the tags of the images (RKE's rule: the tag of the
// kubernetes image says the version); nil otherwise. An image whose tag is
// not a version (a custom build) says nothing, and is not compared. Patch
// releases of one minor version may be moved between either way. Like
// Compute, it is pure.
func CheckDowngrade(d *desired.Cluster, o *observe.Cluster) error {
	if o == nil {
		return nil
	}
	var found []Downgrade
	for _, dn := range d.Nodes {
		on := o.Nodes[dn.Address]
		if on == nil || !on.Reachable {
			continue
		}
		for _, dc := range dn.Containers {
			oc, ok := on.Containers[dc.Name]
			if !ok || !slices.Contains(kubeComponents, dc.Name) {
				continue
			}
			running, wanted := rkemeta.ImageTag(oc.Image), rkemeta.ImageTag(dc.Image)
			r, w := minorOf(running), minorOf(wanted)
			if r >= 0 && w >= 0 && r > w {
				found = append(found, Downgrade{Node: dn.Address, Component: dc.Name, Running: running, Wanted: wanted})
			}
		}
	}
	if len(found) == 0 {
		return nil
	}
	return &DowngradeError{Downgrades: found}
}

// minorOf is the Kubernetes minor version a tag such as v1.32.3-rancher1
// names (32), or -1 when it names none. CKE's tags, which rigger's table
// names for 1.33 to 1.35, have no v and a fourth number (1.33.7.1 is 33).
func minorOf(tag string) int {
	v, ok := tagVersion(tag)
	if !ok || v.Major != 1 {
		return -1
	}
	return int(v.Minor)
}

// tagVersion is the Kubernetes version an image tag names: RKE's
// (v1.32.3-rancher1), upstream's (v1.33.13) or CKE's (1.33.7.1, the
// upstream version and CKE's build number); ok is false when it names none.
func tagVersion(tag string) (v semver.Version, ok bool) {
	if v, err := rkemeta.ParseVersion(tag); err == nil {
		return v, true
	}
	m := ckeTag.FindStringSubmatch(tag)
	if m == nil {
		return semver.Version{}, false
	}
	v, err := semver.Parse(m[1])
	return v, err == nil
}

// ckeTag is a tag of CKE's ghcr.io/cybozu/kubernetes: the upstream version
// and CKE's build number (1.33.7.1).
var ckeTag = regexp.MustCompile(`^(1\.\d+\.\d+)\.\d+$`)

// SkippedMinor is a kube-apiserver that cluster.yml would move more than
// one minor version up at once.
type SkippedMinor struct {
	Node string
	// Running and Wanted are the versions of the observed and the desired
	// image (their tags).
	Running, Wanted string
}

// SkippedMinorError refuses a plan that upgrades the API servers by more
// than one minor version: Kubernetes' version skew policy upgrades them one
// minor at a time (an API server reads only what the previous minor
// stored, and the controllers and kubelets must not be newer than it).
type SkippedMinorError struct {
	Skips []SkippedMinor
}

func (e *SkippedMinorError) Error() string {
	var each []string
	oldest := ""
	for _, s := range e.Skips {
		each = append(each, fmt.Sprintf("kube-apiserver on %s runs %s, cluster.yml asks for %s", s.Node, s.Running, s.Wanted))
		if oldest == "" || minorOf(s.Running) < minorOf(oldest) {
			oldest = s.Running
		}
	}
	next := fmt.Sprintf("v1.%d", minorOf(oldest)+1)
	newest := next + " (the newest patch release `rigger config versions` lists)"
	for _, v := range riggermeta.AllVersions() {
		if rkemeta.Series(v) == next {
			newest = v
		}
	}
	return fmt.Sprintf("cluster.yml would upgrade Kubernetes by more than one minor version at once (%s): Kubernetes upgrades one minor version at a time, "+
		"each complete before the next (the version skew policy: an API server must not skip a minor). Set kubernetes_version (and "+
		"system_images.kubernetes, if set) to %s, apply it, then go on to the next minor", strings.Join(each, "; "), newest)
}

// CheckSkippedMinor returns a *SkippedMinorError when d would run the
// kube-apiserver of a node of o more than one minor version above the one
// it runs there, comparing the tags of the images as CheckDowngrade does;
// nil otherwise. Like Compute, it is pure.
func CheckSkippedMinor(d *desired.Cluster, o *observe.Cluster) error {
	if o == nil {
		return nil
	}
	var found []SkippedMinor
	for _, dn := range d.Nodes {
		on := o.Nodes[dn.Address]
		if on == nil || !on.Reachable {
			continue
		}
		dc, ok := dn.Container(desired.KubeAPIServer)
		oc, running := on.Containers[desired.KubeAPIServer]
		if !ok || !running {
			continue
		}
		r, w := minorOf(rkemeta.ImageTag(oc.Image)), minorOf(rkemeta.ImageTag(dc.Image))
		if r >= 0 && w > r+1 {
			found = append(found, SkippedMinor{Node: dn.Address, Running: rkemeta.ImageTag(oc.Image), Wanted: rkemeta.ImageTag(dc.Image)})
		}
	}
	if len(found) == 0 {
		return nil
	}
	return &SkippedMinorError{Skips: found}
}

// SkewError refuses a cluster.yml whose Kubernetes components would be
// newer than its API servers: the version skew policy allows controller
// managers, schedulers, kubelets and kube-proxies the API servers' minor
// version or an older one, never a newer one.
type SkewError struct {
	Component, Image, APIServerImage string
}

func (e *SkewError) Error() string {
	return fmt.Sprintf("cluster.yml runs %s from %s, a newer Kubernetes minor version than the API servers' %s: "+
		"the version skew policy allows no component newer than an API server. Give services' images (and system_images.kubernetes) one version, "+
		"or keep %s at the API servers' minor version until they are upgraded", e.Component, e.Image, e.APIServerImage, e.Component)
}

// CheckSkew returns a *SkewError when a Kubernetes component of d runs a
// newer minor version than one of d's API servers (a services.*.image of
// its own); nil otherwise. Like Compute, it is pure.
func CheckSkew(d *desired.Cluster) error {
	oldest, oldestImage := -1, ""
	for _, dn := range d.Nodes {
		if c, ok := dn.Container(desired.KubeAPIServer); ok {
			if m := minorOf(rkemeta.ImageTag(c.Image)); m >= 0 && (oldest < 0 || m < oldest) {
				oldest, oldestImage = m, c.Image
			}
		}
	}
	if oldest < 0 {
		return nil
	}
	for _, dn := range d.Nodes {
		for _, c := range dn.Containers {
			if c.Name == desired.KubeAPIServer || !slices.Contains(kubeComponents, c.Name) {
				continue
			}
			if minorOf(rkemeta.ImageTag(c.Image)) > oldest {
				return &SkewError{Component: c.Name, Image: c.Image, APIServerImage: oldestImage}
			}
		}
	}
	return nil
}
