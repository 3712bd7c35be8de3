package spec

import (
	"fmt"
	"regexp"
	"strconv"
)

// DefaultKubernetesVersion is the kubernetes_version of a cluster.yml that sets none.
const DefaultKubernetesVersion = "v1.31.5-rancher1-1"

// release is one Kubernetes version rigger knows the images of.
type release struct {
	version string
	images  SystemImages
}

// releases returns rigger's version table: the published images RKE's
// metadata (KDM) pins for each version. Other versions work when
// system_images names every image they need.
func releases() []release {
	tools := "rancher/rke-tools:v0.1.105"
	return []release{{
		version: "v1.31.5-rancher1-1",
		images: SystemImages{
			Etcd:                      "rancher/mirrored-coreos-etcd:v3.5.16",
			Alpine:                    tools,
			NginxProxy:                tools,
			CertDownloader:            tools,
			KubernetesServicesSidecar: tools,
			KubeDNS:                   "rancher/mirrored-k8s-dns-kube-dns:1.23.0",
			DNSmasq:                   "rancher/mirrored-k8s-dns-dnsmasq-nanny:1.23.0",
			KubeDNSSidecar:            "rancher/mirrored-k8s-dns-sidecar:1.23.0",
			KubeDNSAutoscaler:         "rancher/mirrored-cluster-proportional-autoscaler:v1.9.0",
			CoreDNS:                   "rancher/mirrored-coredns-coredns:1.11.3",
			CoreDNSAutoscaler:         "rancher/mirrored-cluster-proportional-autoscaler:v1.9.0",
			Nodelocal:                 "rancher/mirrored-k8s-dns-node-cache:1.23.0",
			Kubernetes:                "rancher/hyperkube:v1.31.5-rancher1",
			Flannel:                   "rancher/mirrored-flannel-flannel:v0.26.1",
			FlannelCNI:                "rancher/flannel-cni:v1.4.1-rancher1",
			CalicoNode:                "rancher/mirrored-calico-node:v3.29.1",
			CalicoCNI:                 "rancher/calico-cni:v3.29.1-rancher1",
			CalicoControllers:         "rancher/mirrored-calico-kube-controllers:v3.29.1",
			CalicoCtl:                 "rancher/mirrored-calico-ctl:v3.29.1",
			CalicoFlexVol:             "rancher/mirrored-calico-pod2daemon-flexvol:v3.29.1",
			CanalNode:                 "rancher/mirrored-calico-node:v3.29.1",
			CanalCNI:                  "rancher/calico-cni:v3.29.1-rancher1",
			CanalControllers:          "rancher/mirrored-calico-kube-controllers:v3.29.1",
			CanalFlannel:              "rancher/mirrored-flannel-flannel:v0.26.1",
			CanalFlexVol:              "rancher/mirrored-calico-pod2daemon-flexvol:v3.29.1",
			WeaveNode:                 "weaveworks/weave-kube:2.8.1",
			WeaveCNI:                  "weaveworks/weave-npc:2.8.1",
			PodInfraContainer:         "rancher/mirrored-pause:3.7",
			Ingress:                   "rancher/nginx-ingress-controller:nginx-1.11.3-rancher1",
			IngressBackend:            "rancher/mirrored-nginx-ingress-controller-defaultbackend:1.5-rancher2",
			IngressWebhook:            "rancher/mirrored-ingress-nginx-kube-webhook-certgen:v1.4.4",
			MetricsServer:             "rancher/mirrored-metrics-server:v0.7.2",
			WindowsPodInfraContainer:  "rancher/mirrored-pause:3.7",
			TigeraOperator:            "rancher/mirrored-calico-operator:v1.36.2",
		},
	}}
}

// KubernetesVersions lists the versions in rigger's version table.
func KubernetesVersions() []string {
	var out []string
	for _, r := range releases() {
		out = append(out, r.version)
	}
	return out
}

// imagesFor returns the images of a known version; upstream's spelling
// (`v1.31.5`) finds RKE's (`v1.31.5-rancher1-1`).
func imagesFor(version string) (SystemImages, bool) {
	v, err := parseVersion(version)
	if err != nil {
		return SystemImages{}, false
	}
	for _, r := range releases() {
		rv, _ := parseVersion(r.version)
		if r.version == version || (v.suffix == "" && rv.core() == v.core()) {
			return r.images, true
		}
	}
	return SystemImages{}, false
}

// k8sVersion is a parsed kubernetes_version.
type k8sVersion struct {
	major, minor, patch int
	suffix              string // RKE's `-rancher1-1`, or empty
}

func (v k8sVersion) core() string { return fmt.Sprintf("v%d.%d.%d", v.major, v.minor, v.patch) }

var versionRE = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

func parseVersion(s string) (k8sVersion, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return k8sVersion{}, fmt.Errorf("%s is not valid semver", s)
	}
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	return k8sVersion{major: atoi(m[1]), minor: atoi(m[2]), patch: atoi(m[3]), suffix: m[4]}, nil
}
