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

// HyperkubeRecipe is where rigger's recipe for a kubernetes image with all
// five components is, for the versions with no public one.
const HyperkubeRecipe = "deploy/hyperkube"

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

// kubernetesImage refuses one of rigger's versions whose table names no
// kubernetes image (no maintained public image has the five components of
// that minor version) while system_images.kubernetes is not set.
func (v *validator) kubernetesImage(c *Cluster) {
	if !riggermeta.NeedsKubernetesImage(c.KubernetesVersion) || c.SystemImages.Kubernetes != "" {
		return
	}
	upstream, _, _ := strings.Cut(c.KubernetesVersion, riggermeta.Suffix)
	v.errorf("system_images.kubernetes",
		fmt.Sprintf("No maintained public image holds Kubernetes %[1]s's kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy (RKE's hyperkube ends at 1.32), so rigger's table names none. "+
			"Build one from upstream's release binaries with rigger's recipe, push it to a registry your nodes pull from, and set system_images.kubernetes to it: "+
			"docker build --build-arg KUBERNETES_VERSION=%[1]s -t registry.example.com/hyperkube:%[1]s %[2]s (docs/versions.md, \"A kubernetes image for 1.36 and later\").",
			upstream, HyperkubeRecipe),
		"%s: rigger's table has no kubernetes image for this version; set system_images.kubernetes", c.KubernetesVersion)
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
