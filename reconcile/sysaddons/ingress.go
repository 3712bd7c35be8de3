package sysaddons

import (
	"maps"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/rkemeta"
)

// ingressOptions is RKE's ingressOptions, the data of its nginxIngress
// template.
type ingressOptions struct {
	RBACConfig                              string
	Options                                 map[string]string
	NodeSelector                            map[string]string
	ExtraArgs                               map[string]string
	ExtraEnvs                               []corev1.EnvVar
	ExtraVolumes                            []corev1.Volume
	ExtraVolumeMounts                       []corev1.VolumeMount
	DNSPolicy                               string
	AlpineImage                             string
	IngressImage                            string
	IngressBackend                          string
	IngressWebhook                          string
	HTTPPort                                int
	HTTPSPort                               int
	NetworkMode                             string
	DefaultBackend                          bool
	UpdateStrategy                          *appsv1.DaemonSetUpdateStrategy
	Tolerations                             []corev1.Toleration
	NginxIngressControllerPriorityClassName string
	DefaultHTTPBackendPriorityClassName     string
	DefaultIngressClass                     bool
}

// ingress-nginx's objects RKE deletes around its deploy (cluster/addons.go).
var (
	// admissionJobs are deleted before each deploy of a controller newer
	// than 0.40.0 (RKE's NginxIngressAddonJobNames).
	admissionJobs = []addons.ObjectRef{
		{Group: "batch", Version: "v1", Kind: "Job", Namespace: "ingress-nginx", Name: "ingress-nginx-admission-create"},
		{Group: "batch", Version: "v1", Kind: "Job", Namespace: "ingress-nginx", Name: "ingress-nginx-admission-patch"},
	}
	// defaultBackend is deleted after a deploy without it.
	defaultBackend = []addons.ObjectRef{
		{Version: "v1", Kind: "Service", Namespace: "ingress-nginx", Name: "default-http-backend"},
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ingress-nginx", Name: "default-http-backend"},
	}
)

// ingress renders ingress-nginx as RKE's deployIngress does.
func ingress(c *spec.Cluster) ([]Manifest, error) {
	in := &c.Ingress
	if in.Provider == "none" {
		return nil, nil
	}
	envs, err := toKubernetes[corev1.EnvVar]("ingress.extra_envs", in.ExtraEnvs)
	if err != nil {
		return nil, err
	}
	volumes, err := toKubernetes[corev1.Volume]("ingress.extra_volumes", in.ExtraVolumes)
	if err != nil {
		return nil, err
	}
	mounts, err := toKubernetes[corev1.VolumeMount]("ingress.extra_volume_mounts", in.ExtraVolumeMounts)
	if err != nil {
		return nil, err
	}
	o := ingressOptions{
		RBACConfig:                              c.Authorization.Mode,
		Options:                                 in.Options,
		NodeSelector:                            in.NodeSelector,
		ExtraArgs:                               maps.Clone(in.ExtraArgs),
		DNSPolicy:                               in.DNSPolicy,
		IngressImage:                            c.SystemImages.Ingress,
		IngressBackend:                          c.SystemImages.IngressBackend,
		IngressWebhook:                          c.SystemImages.IngressWebhook,
		ExtraEnvs:                               envs,
		ExtraVolumes:                            volumes,
		ExtraVolumeMounts:                       mounts,
		HTTPPort:                                in.HTTPPort,
		HTTPSPort:                               in.HTTPSPort,
		NetworkMode:                             in.NetworkMode,
		DefaultBackend:                          in.DefaultBackend != nil && *in.DefaultBackend,
		UpdateStrategy:                          withDaemonSetDefaults(toDaemonSetStrategy(in.UpdateStrategy)).daemonSet(),
		Tolerations:                             toTolerations(in.Tolerations),
		NginxIngressControllerPriorityClassName: in.NginxIngressControllerPriorityClassName,
		DefaultHTTPBackendPriorityClassName:     in.DefaultHTTPBackendPriorityClassName,
		DefaultIngressClass:                     in.DefaultIngressClass == nil || *in.DefaultIngressClass,
	}
	var recreate []addons.ObjectRef
	if version, ok := controllerVersion(c.SystemImages.Ingress); ok {
		// RKE compares these versions as strings, and so does rigger.
		if version < "0.16.0" {
			o.AlpineImage = c.SystemImages.Alpine
		}
		if version > "0.40.0" {
			recreate = admissionJobs
		}
		// Ingresses without an ingressClassName stay served after an
		// upgrade to 1.x unless extra_args says otherwise.
		if version >= "1.1.0" {
			if _, ok := o.ExtraArgs["watch-ingress-without-class"]; !ok {
				if o.ExtraArgs == nil {
					o.ExtraArgs = map[string]string{}
				}
				o.ExtraArgs["watch-ingress-without-class"] = "true"
			}
		}
	}
	ms, err := manifest(c, Ingress, rkemeta.AddonNginxIngress, o)
	if err != nil {
		return nil, err
	}
	ms[0].Recreate = recreate
	if !o.DefaultBackend {
		ms[0].Remove = defaultBackend
	}
	return ms, nil
}

// controllerVersion reads the ingress-nginx version from the controller
// image's tag as RKE does: the tag's second dash-separated part when it has
// three or more (nginx-1.12.0-rancher1), the first when it has two
// (0.21.0-rancher3). A tag without a dash, on which RKE fails (it indexes
// past the end), is read whole (v1.12.0). ok is false for an image without
// a tag, whose version RKE does not look at.
func controllerVersion(image string) (version string, ok bool) {
	parts := strings.Split(image, ":")
	if len(parts) < 2 {
		return "", false
	}
	tag := strings.Split(parts[len(parts)-1], "-")
	switch len(tag) {
	case 1:
		return tag[0], true
	case 2:
		return tag[0], true
	default:
		return tag[1], true
	}
}
