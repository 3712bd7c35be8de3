package spec

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// Validation of what changes past RKE's table (Kubernetes 1.33 and later,
// riggermeta): the kubernetes image rigger's table cannot name, the flags
// later Kubernetes removed, and the retired ingress-nginx.

// serviceComponents are the Kubernetes binaries of the services whose
// extra_args reach them, by their key under services.
var serviceComponents = []struct{ key, component string }{
	{"kube-api", riggermeta.KubeAPIServer},
	{"kube-controller", riggermeta.KubeControllerManager},
	{"scheduler", riggermeta.KubeScheduler},
	{"kubelet", riggermeta.Kubelet},
	{"kubeproxy", riggermeta.KubeProxy},
}

// componentsMinor returns the 1.x minor version the components run, as
// their default flags are picked (the kubernetes image's tag first, else
// kubernetes_version), and false when it is not known (version() reports
// why).
func componentsMinor(c *Cluster) (int, bool) {
	_, series, err := riggermeta.ServiceOptionsFor(c.KubernetesVersion, c.SystemImages.Kubernetes)
	if err != nil {
		return 0, false
	}
	sv, err := rkemeta.ParseVersion(series + ".0")
	if err != nil || sv.Major != 1 {
		return 0, false
	}
	return int(sv.Minor), true
}

// PinnedKubernetes says, when system_images.kubernetes is set to an image
// whose tag names another Kubernetes release than kubernetes_version, that
// every component keeps running the image's: a set image wins, as in RKE,
// so moving kubernetes_version alone changes nothing, and the user may
// believe the cluster upgraded. It returns what runs and what to do, or
// "" when the two agree or the tag names no release.
func PinnedKubernetes(c *Cluster) (msg, detail string) {
	image := c.SystemImages.Kubernetes
	if image == "" {
		return "", ""
	}
	runs, ok := release(rkemeta.ImageTag(image))
	want, wok := release(c.KubernetesVersion)
	if _, known := componentsMinor(c); !ok || !wok || runs == want || !known {
		return "", "" // an image rigger has no flags for is refused (version)
	}
	return fmt.Sprintf("%s runs Kubernetes %s, not the %s of kubernetes_version %s: every component keeps running %s, as the image is set (a set image wins, as in RKE)",
			image, runs, want, c.KubernetesVersion, runs),
		fmt.Sprintf("To run the images of %s, remove system_images.kubernetes; to keep an image of your own, set it to one of Kubernetes %s.", c.KubernetesVersion, want)
}

// release reads the Kubernetes release a version or image tag names:
// 1.32.13 from v1.32.13-rancher1-3, v1.32.13-rancher1, 1.33.7.1 (CKE's) or
// v1.35.10-fat; false when it names no major.minor.patch.
func release(s string) (string, bool) {
	s = strings.TrimPrefix(s, "v")
	end := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end >= 0 {
		s = s[:end]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 3 || slices.Contains(parts[:3], "") {
		return "", false
	}
	return strings.Join(parts[:3], "."), true
}

// pinnedKubernetes warns of PinnedKubernetes.
func (v *validator) pinnedKubernetes(c *Cluster) {
	if msg, detail := PinnedKubernetes(c); msg != "" {
		v.warnf("system_images.kubernetes", detail, "%s", msg)
	}
}

// removedFlags refuses extra_args and extra_args_array that name a flag
// the Kubernetes the components run no longer accepts: the component would
// exit at start with `unknown flag`.
func (v *validator) removedFlags(c *Cluster) {
	minor, ok := componentsMinor(c)
	if !ok || minor < riggermeta.FirstMinor {
		return
	}
	bases := serviceBases(&c.Services)
	for _, sc := range serviceComponents {
		b := bases[sc.key]
		for _, field := range []struct {
			name string
			keys []string
		}{
			{"extra_args", slices.Sorted(maps.Keys(b.ExtraArgs))},
			{"extra_args_array", slices.Sorted(maps.Keys(b.ExtraArgsArray))},
		} {
			for _, k := range field.keys {
				flag := strings.TrimLeft(k, "-")
				r, removed := riggermeta.Removed(sc.component, flag, minor)
				if !removed {
					continue
				}
				v.errorf(mapKeyPath("services."+sc.key+"."+field.name, k),
					fmt.Sprintf("Kubernetes 1.%d removed --%s from %s (%s), so %s would not start with it. Remove it from services.%s.%s: %s.",
						r.Minor, flag, sc.component, r.Upstream, sc.component, sc.key, field.name, r.Instead),
					"%s of Kubernetes 1.%d has no flag --%s (removed in 1.%d)", sc.component, minor, flag, r.Minor)
			}
		}
	}
}

// IngressRetired says why rigger's versions carry no ingress-nginx.
const IngressRetired = "ingress-nginx was retired upstream in March 2026 and gets no more releases or security fixes"

// retiredIngress refuses ingress.provider nginx on rigger's own versions,
// whose table has no ingress-nginx image, unless the file names the
// images itself; with images of the user's own it warns.
func (v *validator) retiredIngress(c *Cluster) {
	if c.Ingress.Provider != DefaultIngressProvider {
		return
	}
	minor, ok := componentsMinor(c)
	if !ok || minor < riggermeta.FirstMinor {
		return
	}
	alternative := "Set ingress.provider: none and deploy another ingress controller (Traefik, HAProxy Ingress, or a Gateway API implementation such as Envoy Gateway) with addons or addons_include; " +
		"move your Ingress objects to it before the upgrade. To go on with ingress-nginx at your own risk, set system_images.ingress, ingress_backend and ingress_webhook to images you trust."
	if riggermeta.IsRigger(c.KubernetesVersion) && c.SystemImages.Ingress == "" {
		v.errorf("ingress.provider", IngressRetired+", so rigger's table has no image for it. "+alternative+
			" ingress.provider defaults to nginx, as in RKE: a cluster.yml without an ingress section needs ingress.provider: none written out.",
			"Kubernetes %s of rigger's table has no ingress-nginx (ingress.provider: nginx)", c.KubernetesVersion)
		return
	}
	v.warnf("ingress.provider", IngressRetired+". "+alternative,
		"ingress.provider nginx on Kubernetes 1.%d runs a retired ingress controller", minor)
}
