package spec

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/rigger/rigger/spec/rkemeta"
)

var (
	networkPlugins = []string{"canal", "flannel", "calico", "weave", "aci", "none"}
	effects        = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}
)

func (v *validator) network(c *Cluster) {
	n := &c.Network
	if !slices.Contains(networkPlugins, n.Plugin) {
		detail := "Supported: " + strings.Join(networkPlugins, ", ") + "."
		if s := suggest(n.Plugin, networkPlugins); s != "" {
			detail = fmt.Sprintf("Did you mean %q? ", s) + detail
		}
		v.errorf("network.plugin", detail, "Network plugin [%s] is not supported", n.Plugin)
	}
	if n.Plugin == "flannel" && n.MTU != 0 {
		v.errorf("network.mtu", "", "Network plugin [flannel] does not support configuring MTU")
	}
	if n.MTU < 0 {
		v.errorf("network.mtu", "", "mtu must not be negative")
	}
	if n.Plugin == "weave" {
		// RKE's validateNetworkOptions.
		if !inRange(c.KubernetesVersion, rangeWeave) {
			v.errorf("network.plugin", "Weave Net is unmaintained and RKE removed it: move to canal (RKE's default), flannel or calico before Kubernetes 1.30.",
				"weave CNI support is removed for k8s version >=1.30.0")
		} else if inRange(c.KubernetesVersion, rangeWeaveDeprecated) {
			v.warnf("network.plugin", "Plan the move to canal, flannel or calico: Kubernetes 1.30 and later refuse weave.",
				"Weave CNI plugin is deprecated starting with Kubernetes v1.27 and will be removed in Kubernetes v1.30")
		}
	}
	if n.Plugin == "canal" && n.CanalBlackholeRoute() && !rkemeta.FlannelHasBlackholeRoute(c.SystemImages.CanalFlannel) {
		v.warnf("network.options.canal_blackhole_route", "Use a canal_flannel image of flannel v0.28.1 or later (kubernetes_version v1.32.12-rancher1-1 or later has one) for the route, or leave the option out.",
			"Blackhole route requires Flannel version >= v0.28.1, disabling it for image [%s]", c.SystemImages.CanalFlannel)
	}
	if strings.Contains(c.Services.KubeAPI.ServiceClusterIPRange, ",") || strings.Contains(c.Services.KubeController.ClusterCIDR, ",") {
		// Two ranges are dual stack (RKE's validateNetworkOptions).
		switch {
		case n.Plugin != "calico" && n.Plugin != "aci":
			v.errorf("network.plugin", "Of RKE's network plugins, calico and aci support dual stack; or give one range in service_cluster_ip_range and cluster_cidr.",
				"Network plugin [%s] does not support IPv6 (dualstack)", n.Plugin)
		case n.Plugin == "aci" && !inRange(c.KubernetesVersion, rangeACIDualStack):
			v.errorf("kubernetes_version", "RKE's ACI CNI supports dual stack in v1.24.13-rancher2-2 to the end of 1.24, and from v1.25.9-rancher2-2 on.",
				"Cluster version [%s] does not have dualstack supported aci cni version", c.KubernetesVersion)
		}
	}
	v.updateStrategy("network.update_strategy", n.UpdateStrategy, "RollingUpdate", "OnDelete")
	v.tolerations("network.tolerations", n.Tolerations)
}

func (v *validator) updateStrategy(p string, u *DaemonSetUpdateStrategy, allowed ...string) {
	if u != nil {
		v.oneOf(p+".strategy", u.Strategy, true, allowed...)
	}
}

func (v *validator) tolerations(p string, ts []Toleration) {
	for i, t := range ts {
		tp := fmt.Sprintf("%s[%d]", p, i)
		v.oneOf(tp+".operator", t.Operator, true, "Exists", "Equal")
		v.oneOf(tp+".effect", t.Effect, true, effects...)
	}
}

func (v *validator) auth(c *Cluster) {
	strategies := strings.Split(strings.ToLower(c.Authentication.Strategy), "|")
	for _, s := range strategies {
		if s != "x509" && s != "webhook" {
			v.errorf("authentication.strategy", "Use x509, or x509|webhook.", "Authentication strategy [%s] is not supported", s)
		}
	}
	if !slices.Contains(strategies, "x509") {
		v.errorf("authentication.strategy", "Use x509, or x509|webhook.", "Authentication strategy must contain [x509]")
	}
	switch w := c.Authentication.Webhook; {
	case slices.Contains(strategies, "webhook") && w == nil:
		v.errorf("authentication.webhook", "Give authentication.webhook.config_file.", "the webhook strategy needs a webhook config")
	case w != nil && w.ConfigFile == "":
		// RKE falls back to its template for Rancher's kube-api-auth; rigger
		// has no such default.
		v.errorf("authentication.webhook.config_file", "Give the webhook's kubeconfig inline in config_file, or remove authentication.webhook (RKE's default file points at Rancher's kube-api-auth, which rigger does not deploy).",
			"authentication.webhook has no config_file")
	}
	for i, san := range c.Authentication.SANs {
		if net.ParseIP(san) == nil && len(dns1123SubdomainErrors(strings.ToLower(strings.TrimPrefix(san, "*.")))) > 0 {
			v.errorf(fmt.Sprintf("authentication.sans[%d]", i), "", "%q is neither an IP address nor a DNS name", san)
		}
	}
	v.oneOf("authorization.mode", c.Authorization.Mode, false, "rbac", "none")
	if len(c.Authorization.Options) > 0 {
		v.warnf("authorization.options", "Set the API server's authorization flags in services.kube-api.extra_args, and remove authorization.options.",
			"RKE reads authorization.options and never uses it, and rigger ignores it too")
	}
}
