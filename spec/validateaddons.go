package spec

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

func (v *validator) addons(c *Cluster) {
	in := &c.Ingress
	if in.Provider != DefaultIngressProvider && in.Provider != "none" {
		v.errorf("ingress.provider", "Use nginx or none.", "Ingress controller %s is incorrect", in.Provider)
	}
	if in.DNSPolicy != "" && !slices.Contains([]string{"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"}, in.DNSPolicy) {
		v.errorf("ingress.dns_policy", "Use ClusterFirst, ClusterFirstWithHostNet, Default or None.", "DNSPolicy %s was not a valid DNS Policy", in.DNSPolicy)
	}
	if !slices.Contains([]string{"hostNetwork", "hostPort", "none"}, in.NetworkMode) {
		v.errorf("ingress.network_mode", "Use hostNetwork, hostPort or none.", "NetworkMode %s was not a valid network mode", in.NetworkMode)
	}
	if in.HTTPPort < 0 || in.HTTPPort > 65535 {
		v.errorf("ingress.http_port", "", "http port is invalid. Needs to be within 0 to 65535")
	}
	if in.HTTPSPort < 0 || in.HTTPSPort > 65535 {
		v.errorf("ingress.https_port", "", "https port is invalid. Needs to be within 0 to 65535")
	}
	if in.NetworkMode == "hostPort" && in.HTTPPort != 0 && in.HTTPPort == in.HTTPSPort {
		v.errorf("ingress.https_port", "", "http and https ports need to be different")
	}
	v.updateStrategy("ingress.update_strategy", in.UpdateStrategy, "RollingUpdate", "OnDelete")
	v.tolerations("ingress.tolerations", in.Tolerations)

	if d := c.DNS; d != nil {
		v.oneOf("dns.provider", d.Provider, false, "coredns", "kube-dns", "none")
		for i, ns := range d.UpstreamNameservers {
			if net.ParseIP(ns) == nil {
				v.errorf(fmt.Sprintf("dns.upstreamnameservers[%d]", i), "", "%q is not an IP address", ns)
			}
		}
		if d.Nodelocal != nil && net.ParseIP(d.Nodelocal.IPAddress) == nil {
			v.errorf("dns.nodelocal.ip_address", "Use a link-local address such as 169.254.20.10.", "%q is not an IP address", d.Nodelocal.IPAddress)
		}
		if d.UpdateStrategy != nil {
			v.oneOf("dns.update_strategy.strategy", d.UpdateStrategy.Strategy, true, "RollingUpdate", "Recreate")
		}
		v.tolerations("dns.tolerations", d.Tolerations)
	}
	v.oneOf("monitoring.provider", c.Monitoring.Provider, false, "metrics-server", "none")
	if c.Monitoring.Replicas != nil && *c.Monitoring.Replicas < 1 {
		v.errorf("monitoring.replicas", "", "replicas must be at least 1")
	}
	v.tolerations("monitoring.tolerations", c.Monitoring.Tolerations)

	cp := &c.CloudProvider
	for _, cfg := range typedConfigs(cp) {
		if cfg.set && cp.Name != cfg.name {
			v.errorf("cloud_provider.name", fmt.Sprintf("Set cloud_provider.name: %s, or remove %s.", cfg.name, cfg.key),
				"cloud_provider.%s is given but cloud_provider.name is %q", cfg.key, cp.Name)
		}
	}
	v.cloudProvider(c)
}

// typedConfig is one of cloud_provider's typed configs: the provider name
// it belongs to, its key, and whether it is given.
type typedConfig struct {
	name, key string
	set       bool
}

func typedConfigs(cp *CloudProvider) []typedConfig {
	return []typedConfig{
		{"aws", "awsCloudProvider", cp.AWSCloudProvider != nil},
		{"azure", "azureCloudProvider", cp.AzureCloudProvider != nil},
		{"openstack", "openstackCloudProvider", cp.OpenstackCloudProvider != nil},
		{"vsphere", "vsphereCloudProvider", cp.VsphereCloudProvider != nil},
		{"harvester", "harvesterCloudProvider", cp.HarvesterCloudProvider != nil},
	}
}

// cloudProvider checks cloud_provider as RKE's setCloudProvider does, and
// refuses what rigger cannot write yet.
func (v *validator) cloudProvider(c *Cluster) {
	cp := &c.CloudProvider
	if cp.CustomCloudProvider != "" {
		if cp.Name == "" {
			v.errorf("cloud_provider.name", "Name the provider that reads customCloudProvider (external, or the in-tree provider's name).",
				"name of the cloud provider is not defined for custom provider")
		}
	} else if cp.Name != "" {
		if !v.oneOf("cloud_provider.name", cp.Name, true, "aws", "azure", "openstack", "vsphere", "harvester", "external", "external-aws") {
			return
		}
		// Typed configs: RKE writes the cloud config file from them, and so
		// does rigger for azure, openstack and vsphere (desired.cloudConfig).
		for _, cfg := range typedConfigs(cp) {
			switch {
			case cfg.set && cp.Name == cfg.name && (cfg.name == "aws" || cfg.name == "harvester"):
				v.errorf("cloud_provider."+cfg.key, "Give the provider's cloud config file inline in cloud_provider.customCloudProvider instead (keeping name: "+cfg.name+").",
					"rigger does not write the cloud config from %s yet", cfg.key)
			case !cfg.set && cp.Name == cfg.name && cfg.name != "aws":
				// RKE's provider refuses to start without its config; aws
				// runs with an empty cloud config file, as external does.
				v.errorf("cloud_provider.name", "Give the provider's cloud config file inline in cloud_provider.customCloudProvider, or use name: external with the provider's cloud controller manager.",
					"Failed to initialize cloud provider: cloud_provider.%s is empty", cfg.key)
			}
		}
	}
	v.inTreeCloudProvider(c)
	// RKE's setCloudProvider: Kubernetes 1.27 removed the in-tree AWS provider.
	if cp.Name == "aws" && inRange(c.KubernetesVersion, rangeNoInTreeAWS) {
		v.errorf("cloud_provider.name", "Kubernetes 1.27 and later have no in-tree AWS cloud provider: use name: external-aws and deploy the AWS cloud controller manager.",
			"Cloud provider aws is invalid for [%s]", c.KubernetesVersion)
	}
}

// inTreeRemoved is the first Kubernetes minor version without each in-tree
// cloud provider RKE can configure (k8s.io/legacy-cloud-providers: openstack
// is gone from v0.26, azure and vsphere from v0.30; aws is RKE's own check).
var inTreeRemoved = map[string]int{"openstack": 26, "azure": 30, "vsphere": 30}

// inTreeCloudProvider refuses, with what to do instead, an in-tree cloud
// provider that the cluster's Kubernetes no longer has: RKE passes
// --cloud-provider=<name> to the components anyway, and they do not start.
// The version is the one the components' flags follow (the kubernetes
// image's tag, else kubernetes_version).
func (v *validator) inTreeCloudProvider(c *Cluster) {
	cp := &c.CloudProvider
	removed, ok := inTreeRemoved[cp.Name]
	if !ok {
		return
	}
	_, series, err := riggermeta.ServiceOptionsFor(c.KubernetesVersion, c.SystemImages.Kubernetes)
	if err != nil {
		return // said by version()
	}
	sv, err := rkemeta.ParseVersion(series + ".0")
	if err != nil || sv.Major != 1 || sv.Minor < uint64(removed)-1 {
		return
	}
	if sv.Minor == 29 && removed == 30 {
		// Upstream 1.29 turns the DisableCloudProviders gate on: the API
		// server, controller manager and kubelet refuse an in-tree provider.
		v.warnf("cloud_provider.name", "Set feature-gates: DisableCloudProviders=false in extra_args of services.kube-api, kube-controller and kubelet (the API server refuses the provider otherwise), or move to name: external with the "+cp.Name+" cloud controller manager before Kubernetes 1.30, which has no in-tree "+cp.Name+" provider.",
			"Kubernetes 1.29 disables the in-tree %s cloud provider by default (feature gate DisableCloudProviders)", cp.Name)
		return
	}
	if sv.Minor < uint64(removed) {
		return
	}
	v.errorf("cloud_provider.name", fmt.Sprintf("Kubernetes 1.%d removed the in-tree %s cloud provider, so the components cannot start with it (RKE would write the cloud config and fail there). "+
		"Use name: external (with customCloudProvider if your cloud controller manager reads one) and deploy the %s cloud controller manager in the cluster, or run Kubernetes before 1.%d.", removed, cp.Name, cp.Name, removed),
		"Kubernetes %s has no in-tree %s cloud provider", strings.TrimPrefix(series, "v"), cp.Name)
}
