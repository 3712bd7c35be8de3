package desired

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/spec"
)

// The cloud config files RKE v1.8.14 writes from the typed blocks of
// cloud_provider (its cloudprovider package, GenerateCloudConfigFile of
// each provider), byte for byte: the tests compare them with RKE's own
// (hack/rke-render -parse).

// azureConfig is RKE's azure.GenerateCloudConfigFile: the block as JSON
// with RKE's json names, indented with a newline for each level (RKE's
// json.MarshalIndent(config, "", "\n")).
func azureConfig(a *spec.AzureCloudProvider) ([]byte, error) {
	// RKE's AzureCloudProvider, with its json tags: the keys RKE leaves out
	// when empty are those with omitempty here.
	v := struct {
		Cloud                        string `json:"cloud"`
		TenantID                     string `json:"tenantId"`
		SubscriptionID               string `json:"subscriptionId"`
		ResourceGroup                string `json:"resourceGroup"`
		Location                     string `json:"location"`
		VnetName                     string `json:"vnetName"`
		VnetResourceGroup            string `json:"vnetResourceGroup"`
		SubnetName                   string `json:"subnetName"`
		SecurityGroupName            string `json:"securityGroupName"`
		SecurityGroupResourceGroup   string `json:"securityGroupResourceGroup,omitempty"`
		RouteTableName               string `json:"routeTableName"`
		PrimaryAvailabilitySetName   string `json:"primaryAvailabilitySetName"`
		VMType                       string `json:"vmType"`
		PrimaryScaleSetName          string `json:"primaryScaleSetName"`
		AADClientID                  string `json:"aadClientId"`
		AADClientSecret              string `json:"aadClientSecret"`
		AADClientCertPath            string `json:"aadClientCertPath"`
		AADClientCertPassword        string `json:"aadClientCertPassword"`
		CloudProviderBackoff         bool   `json:"cloudProviderBackoff"`
		CloudProviderBackoffRetries  int    `json:"cloudProviderBackoffRetries"`
		CloudProviderBackoffExponent int    `json:"cloudProviderBackoffExponent"`
		CloudProviderBackoffDuration int    `json:"cloudProviderBackoffDuration"`
		CloudProviderBackoffJitter   int    `json:"cloudProviderBackoffJitter"`
		CloudProviderRateLimit       bool   `json:"cloudProviderRateLimit"`
		CloudProviderRateLimitQPS    int    `json:"cloudProviderRateLimitQPS"`
		CloudProviderRateLimitBucket int    `json:"cloudProviderRateLimitBucket"`
		UseInstanceMetadata          bool   `json:"useInstanceMetadata"`
		UseManagedIdentityExtension  bool   `json:"useManagedIdentityExtension"`
		UserAssignedIdentityID       string `json:"userAssignedIdentityID,omitempty"`
		MaximumLoadBalancerRuleCount int    `json:"maximumLoadBalancerRuleCount"`
		LoadBalancerSku              string `json:"loadBalancerSku,omitempty"`
		ExcludeMasterFromStandardLB  *bool  `json:"excludeMasterFromStandardLB,omitempty"`
		Tags                         string `json:"tags,omitempty"`
	}{
		a.Cloud, a.TenantID, a.SubscriptionID, a.ResourceGroup, a.Location, a.VnetName, a.VnetResourceGroup, a.SubnetName,
		a.SecurityGroupName, a.SecurityGroupResourceGroup, a.RouteTableName, a.PrimaryAvailabilitySetName, a.VMType,
		a.PrimaryScaleSetName, a.AADClientID, a.AADClientSecret, a.AADClientCertPath, a.AADClientCertPassword,
		a.CloudProviderBackoff, a.CloudProviderBackoffRetries, a.CloudProviderBackoffExponent, a.CloudProviderBackoffDuration,
		a.CloudProviderBackoffJitter, a.CloudProviderRateLimit, a.CloudProviderRateLimitQPS, a.CloudProviderRateLimitBucket,
		a.UseInstanceMetadata, a.UseManagedIdentityExtension, a.UserAssignedIdentityID, a.MaximumLoadBalancerRuleCount,
		a.LoadBalancerSku, a.ExcludeMasterFromStandardLB, a.Tags,
	}
	b, err := json.MarshalIndent(v, "", "\n")
	if err != nil {
		return nil, fmt.Errorf("cloud_provider.azureCloudProvider: %w", err)
	}
	return b, nil
}

// iniKey is a key of an INI section; an empty value leaves it out.
type iniKey struct{ name, value string }

// openstackConfig is RKE's openstack.GenerateCloudConfigFile, which
// reflects the block into go-ini v1.37.0 and writes it: every section, in
// RKE's order, even when empty; its keys that are set, in RKE's order,
// with the `=` of a section aligned after its longest key; a blank line
// after each section. A value with a newline or a backquote is written
// between `"""`.
func openstackConfig(o *spec.OpenstackCloudProvider) []byte {
	str := func(name, v string) iniKey { return iniKey{name, v} }
	flag := func(name string, v bool) iniKey {
		if !v {
			return iniKey{name, ""}
		}
		return iniKey{name, "true"}
	}
	num := func(name string, v int) iniKey {
		if v == 0 {
			return iniKey{name, ""}
		}
		return iniKey{name, fmt.Sprint(v)}
	}
	g, lb, bs := o.Global, o.LoadBalancer, o.BlockStorage
	sections := []struct {
		name string
		keys []iniKey
	}{
		{"Global", []iniKey{str("auth-url", g.AuthURL), str("username", g.Username), str("user-id", g.UserID),
			str("password", g.Password), str("tenant-id", g.TenantID), str("tenant-name", g.TenantName),
			str("trust-id", g.TrustID), str("domain-id", g.DomainID), str("domain-name", g.DomainName),
			str("region", g.Region), str("ca-file", g.CAFile)}},
		{"LoadBalancer", []iniKey{str("lb-version", lb.LBVersion), flag("use-octavia", lb.UseOctavia),
			str("subnet-id", lb.SubnetID), str("floating-network-id", lb.FloatingNetworkID), str("lb-method", lb.LBMethod),
			str("lb-provider", lb.LBProvider), flag("create-monitor", lb.CreateMonitor), str("monitor-delay", lb.MonitorDelay),
			str("monitor-timeout", lb.MonitorTimeout), num("monitor-max-retries", lb.MonitorMaxRetries),
			flag("manage-security-groups", lb.ManageSecurityGroups)}},
		{"BlockStorage", []iniKey{str("bs-version", bs.BSVersion), flag("trust-device-path", bs.TrustDevicePath),
			flag("ignore-volume-az", bs.IgnoreVolumeAZ)}},
		{"Route", []iniKey{str("router-id", o.Route.RouterID)}},
		{"Metadata", []iniKey{str("search-order", o.Metadata.SearchOrder), num("request-timeout", o.Metadata.RequestTimeout)}},
	}
	var b bytes.Buffer
	for _, s := range sections {
		keys := slices.DeleteFunc(s.keys, func(k iniKey) bool { return k.value == "" })
		width := 0
		for _, k := range keys {
			width = max(width, len(k.name))
		}
		b.WriteString("[" + s.name + "]\n")
		for _, k := range keys {
			v := k.value
			if strings.ContainsAny(v, "\n`") {
				v = `"""` + v + `"""`
			}
			b.WriteString(k.name + strings.Repeat(" ", width-len(k.name)) + " = " + v + "\n")
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// vsphereConfig is RKE's vsphere.GenerateCloudConfigFile (its
// VsphereCloudProviderTemplate): the values are written as they are, in
// double quotes but scsicontrollertype; the [VirtualCenter] sections in the
// order of their names.
func vsphereConfig(v *spec.VsphereCloudProvider) []byte {
	const in = "\n        "
	var b strings.Builder
	// The value as it is, between double quotes (no escaping, as RKE's
	// template writes it); opt leaves an empty one out.
	quoted := func(prefix, key, val string) { b.WriteString(prefix + key + ` = "` + val + `"`) }
	opt := func(prefix, key, val string) {
		if val != "" {
			quoted(prefix, key, val)
		}
	}
	g := v.Global
	b.WriteString("\n[Global]")
	quoted("\n", "user", g.User)
	quoted("\n", "password", g.Password)
	opt("\n", "server", g.VCenterIP)
	opt("\n", "port", g.VCenterPort)
	quoted("\n", "insecure-flag", fmt.Sprint(g.InsecureFlag))
	opt("\n", "datacenters", g.Datacenters)
	opt("\n", "datacenter", g.Datacenter)
	opt("\n", "datastore", g.DefaultDatastore)
	opt("\n", "working-dir", g.WorkingDir)
	quoted("\n", "soap-roundtrip-count", fmt.Sprint(g.RoundTripperCount))
	opt("\n", "vm-uuid", g.VMUUID)
	opt("\n", "vm-name", g.VMName)
	b.WriteString("\n\n")
	names := make([]string, 0, len(v.VirtualCenter))
	for name := range v.VirtualCenter {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		vc := v.VirtualCenter[name]
		b.WriteString("\n[VirtualCenter \"" + name + "\"]")
		quoted(in, "user", vc.User)
		quoted(in, "password", vc.Password)
		opt(in, "port", vc.VCenterPort)
		opt(in, "datacenters", vc.Datacenters)
		quoted(in, "soap-roundtrip-count", fmt.Sprint(vc.RoundTripperCount))
	}
	w := v.Workspace
	b.WriteString("\n\n[Workspace]")
	quoted(in, "server", w.VCenterIP)
	quoted(in, "datacenter", w.Datacenter)
	quoted(in, "folder", w.Folder)
	quoted(in, "default-datastore", w.DefaultDatastore)
	quoted(in, "resourcepool-path", w.ResourcePoolPath)
	b.WriteString("\n\n[Disk]")
	if s := v.Disk.SCSIControllerType; s != "" {
		b.WriteString(in + "scsicontrollertype = " + s)
	}
	b.WriteString("\n\n[Network]")
	opt(in, "public-network", v.Network.PublicNetwork)
	b.WriteString("\n")
	return []byte(b.String())
}
