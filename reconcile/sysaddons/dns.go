package sysaddons

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/rkemeta"
)

// dns.options keys RKE reads (cluster/addons.go).
const (
	optCoreDNSPriorityClass           = "coredns_priority_class_name"
	optCoreDNSAutoscalerPriorityClass = "coredns_autoscaler_priority_class_name"
	optKubeDNSPriorityClass           = "kube_dns_priority_class_name"
	optKubeDNSAutoscalerPriorityClass = "kube_dns_autoscaler_priority_class_name"
	dnsKubeDNS                        = "kube-dns"
)

// coreDNSOptions is RKE's CoreDNSOptions, the data of its coreDNS
// template. RKE's CoreDNS has no stub domains: dns.stubdomains is read by
// kube-dns only.
type coreDNSOptions struct {
	RBACConfig                         string
	CoreDNSImage                       string
	CoreDNSAutoScalerImage             string
	ClusterDomain                      string
	ClusterDNSServer                   string
	ReverseCIDRs                       []string
	UpstreamNameservers                []string
	NodeSelector                       map[string]string
	UpdateStrategy                     *appsv1.DeploymentStrategy
	LinearAutoscalerParams             string
	Tolerations                        []corev1.Toleration
	CoreDNSPriorityClassName           string
	CoreDNSAutoscalerPriorityClassName string
}

// kubeDNSOptions is RKE's KubeDNSOptions, the data of its kubeDNS template.
type kubeDNSOptions struct {
	RBACConfig                         string
	KubeDNSImage                       string
	DNSMasqImage                       string
	KubeDNSAutoScalerImage             string
	KubeDNSSidecarImage                string
	ClusterDomain                      string
	ClusterDNSServer                   string
	ReverseCIDRs                       []string
	UpstreamNameservers                []string
	StubDomains                        map[string][]string
	NodeSelector                       map[string]string
	UpdateStrategy                     *appsv1.DeploymentStrategy
	LinearAutoscalerParams             string
	Tolerations                        []corev1.Toleration
	KubeDNSPriorityClassName           string
	KubeDNSAutoscalerPriorityClassName string
}

// nodelocalOptions is RKE's NodelocalOptions, the data of its nodelocal
// template.
type nodelocalOptions struct {
	RBACConfig                    string
	NodelocalImage                string
	ClusterDomain                 string
	ClusterDNSServer              string
	IPAddress                     string
	NodeSelector                  map[string]string
	UpdateStrategy                *appsv1.DaemonSetUpdateStrategy
	NodeLocalDNSPriorityClassName string
}

// linearAutoscalerParams is RKE's LinearAutoscalerParams, which RKE hands
// the DNS templates as JSON: the cluster-proportional-autoscaler's
// --default-params.
type linearAutoscalerParams struct {
	CoresPerReplica           float64 `json:"coresPerReplica,omitempty"`
	NodesPerReplica           float64 `json:"nodesPerReplica,omitempty"`
	Min                       int     `json:"min,omitempty"`
	Max                       int     `json:"max,omitempty"`
	PreventSinglePointFailure bool    `json:"preventSinglePointFailure,omitempty"`
}

// autoscalerParams is dns.linear_autoscaler_params as RKE hands it to the
// templates. RKE's default, when none is given, is
// DefaultClusterProportionalAutoscalerLinearParams. When the block is
// given, rigger's spec has filled its empty cores_per_replica,
// nodes_per_replica and min with 128, 4 and 1 (the defaults Rancher
// applies); RKE's CLI leaves them out.
func autoscalerParams(p *spec.LinearAutoscalerParams) (string, error) {
	l := linearAutoscalerParams{CoresPerReplica: 128, NodesPerReplica: 4, Min: 1, PreventSinglePointFailure: true}
	if p != nil {
		l = linearAutoscalerParams{
			CoresPerReplica:           p.CoresPerReplica,
			NodesPerReplica:           p.NodesPerReplica,
			Min:                       p.Min,
			Max:                       p.Max,
			PreventSinglePointFailure: p.PreventSinglePointFailure,
		}
	}
	j, err := json.Marshal(l)
	if err != nil {
		return "", fmt.Errorf("dns.linear_autoscaler_params: %w", err)
	}
	return string(j), nil
}

// dns renders the DNS provider and NodeLocal DNSCache as RKE's deployDNS
// does: nothing for provider none (nodelocal neither); nodelocal when
// dns.nodelocal.ip_address is set.
func dns(c *spec.Cluster) ([]Manifest, error) {
	d := c.DNS
	if d == nil || d.Provider == "none" {
		return nil, nil
	}
	params, err := autoscalerParams(d.LinearAutoscalerParams)
	if err != nil {
		return nil, err
	}
	strategy := withDNSDefaults(toDeploymentStrategy(d.UpdateStrategy), d.Provider).deployment()
	k := &c.Services.Kubelet
	im := &c.SystemImages

	var out []Manifest
	switch d.Provider {
	case spec.DefaultDNSProvider:
		ms, err := manifest(c, CoreDNS, rkemeta.AddonCoreDNS, coreDNSOptions{
			RBACConfig:                         c.Authorization.Mode,
			CoreDNSImage:                       im.CoreDNS,
			CoreDNSAutoScalerImage:             im.CoreDNSAutoscaler,
			ClusterDomain:                      k.ClusterDomain,
			ClusterDNSServer:                   k.ClusterDNSServer,
			ReverseCIDRs:                       d.ReverseCIDRs,
			UpstreamNameservers:                d.UpstreamNameservers,
			NodeSelector:                       d.NodeSelector,
			UpdateStrategy:                     strategy,
			LinearAutoscalerParams:             params,
			Tolerations:                        toTolerations(d.Tolerations),
			CoreDNSPriorityClassName:           d.Options[optCoreDNSPriorityClass],
			CoreDNSAutoscalerPriorityClassName: d.Options[optCoreDNSAutoscalerPriorityClass],
		})
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	case dnsKubeDNS:
		ms, err := manifest(c, KubeDNS, rkemeta.AddonKubeDNS, kubeDNSOptions{
			RBACConfig:                         c.Authorization.Mode,
			KubeDNSImage:                       im.KubeDNS,
			DNSMasqImage:                       im.DNSmasq,
			KubeDNSAutoScalerImage:             im.KubeDNSAutoscaler,
			KubeDNSSidecarImage:                im.KubeDNSSidecar,
			ClusterDomain:                      k.ClusterDomain,
			ClusterDNSServer:                   k.ClusterDNSServer,
			ReverseCIDRs:                       d.ReverseCIDRs,
			UpstreamNameservers:                d.UpstreamNameservers,
			StubDomains:                        d.StubDomains,
			NodeSelector:                       d.NodeSelector,
			UpdateStrategy:                     strategy,
			LinearAutoscalerParams:             params,
			Tolerations:                        toTolerations(d.Tolerations),
			KubeDNSPriorityClassName:           d.Options[optKubeDNSPriorityClass],
			KubeDNSAutoscalerPriorityClassName: d.Options[optKubeDNSAutoscalerPriorityClass],
		})
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	default:
		return nil, fmt.Errorf("dns.provider: unsupported DNS provider %q; use coredns, kube-dns or none", d.Provider)
	}

	if n := d.Nodelocal; n != nil && n.IPAddress != "" {
		o := nodelocalOptions{
			RBACConfig:                    c.Authorization.Mode,
			NodelocalImage:                im.Nodelocal,
			ClusterDomain:                 k.ClusterDomain,
			ClusterDNSServer:              k.ClusterDNSServer,
			IPAddress:                     n.IPAddress,
			NodeSelector:                  n.NodeSelector,
			NodeLocalDNSPriorityClassName: n.NodeLocalDNSPriorityClassName,
		}
		// RKE gives nodelocal no default strategy: the template has its own.
		if s := toDaemonSetStrategy(n.UpdateStrategy); s != nil {
			o.UpdateStrategy = s.daemonSet()
		}
		ms, err := manifest(c, Nodelocal, rkemeta.AddonNodelocal, o)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}
