package spec

import (
	"fmt"
	"strings"

	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// DefaultKubernetesVersion is the kubernetes_version of a cluster.yml that
// sets none: RKE v1.8.14's default.
const DefaultKubernetesVersion = rkemeta.DefaultVersion

// Version ranges RKE v1.8.14 gates behaviour on, in blang/semver syntax
// (rkemeta.MatchRange), as RKE writes them.
const (
	// rangeCRIDockerd: from here enable_cri_dockerd defaults to true
	// (RKE's parsedRangeAtLeast124).
	rangeCRIDockerd = ">= 1.24.0-rancher0"
	// rangeIngressHostPort: from here ingress.network_mode defaults to
	// hostPort, and the ingress webhook image is needed.
	rangeIngressHostPort = ">=1.21.0-rancher0"
	// rangeIngressNoDefaultBackend: from here ingress.default_backend
	// defaults to false.
	rangeIngressNoDefaultBackend = ">=1.21.0-rancher0"
	// rangeNoInTreeAWS: from here cloud_provider.name aws is refused.
	rangeNoInTreeAWS = ">=1.27.0-rancher0"
	// rangeWeave: weave is supported below this only.
	rangeWeave = "<1.30.0-rancher0"
	// rangeWeaveDeprecated: from here RKE warns that weave is deprecated
	// (it compares with v1.27.0 as a version, not a range).
	rangeWeaveDeprecated = ">=1.27.0"
	// rangeACIDualStack: the versions whose ACI CNI supports dual stack.
	rangeACIDualStack = ">=1.23.16-rancher2-3 <=1.23.99 || >=1.24.13-rancher2-2 <=1.24.99 || >=1.25.9-rancher2-2"
)

// KubernetesVersions lists the versions rigger fills system_images for:
// every version RKE v1.8.14 knows from 1.24 on, then rigger's own after
// 1.32 (riggermeta), oldest first.
func KubernetesVersions() []string { return riggermeta.AllVersions() }

// KnownImages returns the images of a kubernetes_version of the version
// table, which must be written exactly as the table writes it
// (v1.31.5-rancher1-1, v1.33.7-rigger1): RKE looks it up as it is written.
// The kubernetes image of rigger's versions that have no public one is
// empty (riggermeta.NeedsKubernetesImage).
func KnownImages(version string) (SystemImages, bool) {
	im, ok := riggermeta.AllImages(version)
	if !ok {
		return SystemImages{}, false
	}
	return SystemImages{
		Etcd:                      im.Etcd,
		Alpine:                    im.Alpine,
		NginxProxy:                im.NginxProxy,
		CertDownloader:            im.CertDownloader,
		KubernetesServicesSidecar: im.KubernetesServicesSidecar,
		KubeDNS:                   im.KubeDNS,
		DNSmasq:                   im.DNSmasq,
		KubeDNSSidecar:            im.KubeDNSSidecar,
		KubeDNSAutoscaler:         im.KubeDNSAutoscaler,
		CoreDNS:                   im.CoreDNS,
		CoreDNSAutoscaler:         im.CoreDNSAutoscaler,
		Nodelocal:                 im.Nodelocal,
		Kubernetes:                im.Kubernetes,
		Flannel:                   im.Flannel,
		FlannelCNI:                im.FlannelCNI,
		CalicoNode:                im.CalicoNode,
		CalicoCNI:                 im.CalicoCNI,
		CalicoControllers:         im.CalicoControllers,
		CalicoCtl:                 im.CalicoCtl,
		CalicoFlexVol:             im.CalicoFlexVol,
		CanalNode:                 im.CanalNode,
		CanalCNI:                  im.CanalCNI,
		CanalControllers:          im.CanalControllers,
		CanalFlannel:              im.CanalFlannel,
		CanalFlexVol:              im.CanalFlexVol,
		WeaveNode:                 im.WeaveNode,
		WeaveCNI:                  im.WeaveCNI,
		PodInfraContainer:         im.PodInfraContainer,
		Ingress:                   im.Ingress,
		IngressBackend:            im.IngressBackend,
		IngressWebhook:            im.IngressWebhook,
		MetricsServer:             im.MetricsServer,
		WindowsPodInfraContainer:  im.WindowsPodInfraContainer,
		AciCniDeployContainer:     im.AciCniDeployContainer,
		AciHostContainer:          im.AciHostContainer,
		AciOpflexContainer:        im.AciOpflexContainer,
		AciMcastContainer:         im.AciMcastContainer,
		AciOpenvSwitchContainer:   im.AciOpenvSwitchContainer,
		AciControllerContainer:    im.AciControllerContainer,
		AciGbpServerContainer:     im.AciGbpServerContainer,
		AciOpflexServerContainer:  im.AciOpflexServerContainer,
	}, true
}

// inRange reports whether kubernetes_version lies in an RKE version range;
// false for a version that does not parse (validation reports it).
func inRange(version, rng string) bool {
	ok, err := rkemeta.MatchRange(version, rng)
	return err == nil && ok
}

// sameSeries returns the versions of the table with version's major.minor,
// for a "did you mean" (v1.31.5 → v1.31.5-rancher1-1 first).
func sameSeries(version string) []string {
	v, err := rkemeta.ParseVersion(version)
	if err != nil {
		return nil
	}
	var exact, series []string
	for _, known := range KubernetesVersions() {
		kv, _ := rkemeta.ParseVersion(known)
		switch {
		case kv.Major == v.Major && kv.Minor == v.Minor && kv.Patch == v.Patch:
			exact = append(exact, known)
		case kv.Major == v.Major && kv.Minor == v.Minor:
			series = append(series, known)
		}
	}
	return append(exact, series...)
}

// imageNeed is a system_images key the cluster needs, with RKE's words
// for it when it is missing.
type imageNeed struct {
	key, value, missing string
}

// neededImages lists the system_images keys RKE's validateSystemImages
// requires of a cluster whose kubernetes_version is not in the table, in
// RKE's order, with RKE's message for each.
func neededImages(c *Cluster) []imageNeed {
	im := c.SystemImages
	need := []imageNeed{
		{"etcd", im.Etcd, "etcd image is not populated"},
		{"kubernetes", im.Kubernetes, "kubernetes image is not populated"},
		{"pod_infra_container", im.PodInfraContainer, "pod infrastructure container image is not populated"},
		{"alpine", im.Alpine, "alpine image is not populated"},
		{"nginx_proxy", im.NginxProxy, "nginx proxy image is not populated"},
		{"cert_downloader", im.CertDownloader, "certificate downloader image is not populated"},
		{"kubernetes_services_sidecar", im.KubernetesServicesSidecar, "kubernetes sidecar image is not populated"},
	}
	switch c.Network.Plugin {
	case "flannel":
		need = append(need,
			imageNeed{"flannel", im.Flannel, "flannel image is not populated"},
			imageNeed{"flannel_cni", im.FlannelCNI, "flannel cni image is not populated"})
	case "canal":
		need = append(need,
			imageNeed{"canal_node", im.CanalNode, "canal image is not populated"},
			imageNeed{"canal_cni", im.CanalCNI, "canal cni image is not populated"},
			imageNeed{"canal_flannel", im.CanalFlannel, "flannel image is not populated"})
	case "calico":
		need = append(need,
			imageNeed{"calico_cni", im.CalicoCNI, "calico cni image is not populated"},
			imageNeed{"calico_ctl", im.CalicoCtl, "calico ctl image is not populated"},
			imageNeed{"calico_node", im.CalicoNode, "calico image is not populated"},
			imageNeed{"calico_controllers", im.CalicoControllers, "calico controllers image is not populated"})
	case "weave":
		need = append(need,
			imageNeed{"weave_cni", im.WeaveCNI, "weave cni image is not populated"},
			imageNeed{"weave_node", im.WeaveNode, "weave image is not populated"})
	case "aci":
		need = append(need,
			imageNeed{"aci_cni_deploy_container", im.AciCniDeployContainer, "aci cnideploy image is not populated"},
			imageNeed{"aci_host_container", im.AciHostContainer, "aci host container image is not populated"},
			imageNeed{"aci_opflex_container", im.AciOpflexContainer, "aci opflex agent image is not populated"},
			imageNeed{"aci_mcast_container", im.AciMcastContainer, "aci mcast container image is not populated"},
			imageNeed{"aci_ovs_container", im.AciOpenvSwitchContainer, "aci openvswitch image is not populated"},
			imageNeed{"aci_controller_container", im.AciControllerContainer, "aci controller image is not populated"})
	}
	if d := c.DNS; d != nil {
		switch d.Provider {
		case "kube-dns":
			need = append(need,
				imageNeed{"kubedns", im.KubeDNS, "kubedns image is not populated"},
				imageNeed{"dnsmasq", im.DNSmasq, "dnsmasq image is not populated"},
				imageNeed{"kubedns_sidecar", im.KubeDNSSidecar, "kubedns sidecar image is not populated"},
				imageNeed{"kubedns_autoscaler", im.KubeDNSAutoscaler, "kubedns autoscaler image is not populated"})
		case "coredns":
			need = append(need,
				imageNeed{"coredns", im.CoreDNS, "coredns image is not populated"},
				imageNeed{"coredns_autoscaler", im.CoreDNSAutoscaler, "coredns autoscaler image is not populated"})
		}
		if d.Nodelocal != nil {
			need = append(need, imageNeed{"nodelocal", im.Nodelocal, "nodelocal image is not populated"})
		}
	}
	if c.Monitoring.Provider != "none" {
		need = append(need, imageNeed{"metrics_server", im.MetricsServer, "metrics server images is not populated"})
	}
	if c.Ingress.Provider != "none" {
		need = append(need,
			imageNeed{"ingress", im.Ingress, "ingress image is not populated"},
			imageNeed{"ingress_backend", im.IngressBackend, "ingress backend image is not populated"})
		if inRange(c.KubernetesVersion, rangeIngressHostPort) {
			need = append(need, imageNeed{"ingress_webhook", im.IngressWebhook, "ingress webhook image is not populated"})
		}
	}
	return need
}

// missingImages returns the needed system_images keys that are empty, and
// RKE's message for the first.
func missingImages(c *Cluster) (keys []string, first string) {
	for _, n := range neededImages(c) {
		if n.value == "" {
			if first == "" {
				first = n.missing
			}
			keys = append(keys, "system_images."+n.key)
		}
	}
	return keys, first
}

// versionDetail suggests what to do about a kubernetes_version that is not
// in the table.
func versionDetail(version string, missing []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Set %s, ", strings.Join(missing, ", "))
	if near := sameSeries(version); len(near) > 0 {
		fmt.Fprintf(&b, "or use a version of rigger's table, which fills them in: %s", near[0])
		if len(near) > 1 {
			fmt.Fprintf(&b, " (or %s)", strings.Join(near[1:min(len(near), 4)], ", "))
		}
		b.WriteString(".")
	} else {
		b.WriteString("or use a version of rigger's table, which fills them in (`rigger config versions` lists them).")
	}
	b.WriteString(" RKE, like rigger, finds a version's images only when it is written exactly as in the table.")
	return b.String()
}
