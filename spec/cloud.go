package spec

// Cloud provider configs. Their keys keep RKE's spelling, which mixes
// camelCase (Azure) and the cloud config files' dashed names (AWS, OpenStack,
// vSphere); rigger writes them to the cloud config file unchanged.

// AWSCloudProvider is the AWS cloud config.
type AWSCloudProvider struct {
	// The [Global] section.
	Global AWSGlobal `json:"global,omitempty"`
	// [ServiceOverride] sections, by name.
	ServiceOverride map[string]AWSServiceOverride `json:"service_override,omitempty"`
}

// AWSGlobal is the [Global] section of the AWS cloud config.
type AWSGlobal struct {
	// Availability zone.
	Zone string `json:"zone,omitempty"`
	// VPC of the cluster.
	VPC string `json:"vpc,omitempty"`
	// Subnet used for ELBs.
	SubnetID string `json:"subnet-id,omitempty"`
	// Route table to use.
	RouteTableID string `json:"routetable-id,omitempty"`
	// IAM role to assume.
	RoleARN string `json:"role-arn,omitempty"`
	// Legacy cluster tag of the cluster's resources.
	KubernetesClusterTag string `json:"kubernetes-cluster-tag,omitempty"`
	// Cluster ID of the cluster's resources.
	KubernetesClusterID string `json:"kubernetes-cluster-id,omitempty"`
	// Do not create security group ingress rules for load balancers.
	DisableSecurityGroupIngress bool `json:"disable-security-group-ingress,omitempty"`
	// Security group used for every ELB.
	ElbSecurityGroup string `json:"elb-security-group,omitempty"`
	// Skip the check of the region against the known ones.
	DisableStrictZoneCheck bool `json:"disable-strict-zone-check,omitempty"`
}

// AWSServiceOverride overrides an AWS service endpoint.
type AWSServiceOverride struct {
	// Service name, e.g. `ec2`.
	Service string `json:"service,omitempty"`
	// Region of the endpoint.
	Region string `json:"region,omitempty"`
	// Endpoint URL.
	URL string `json:"url,omitempty"`
	// Signing region.
	SigningRegion string `json:"signing-region,omitempty"`
	// Signing method.
	SigningMethod string `json:"signing-method,omitempty"`
	// Signing name.
	SigningName string `json:"signing-name,omitempty"`
}

// AzureCloudProvider is the Azure cloud config.
type AzureCloudProvider struct {
	// Cloud environment, e.g. `AzurePublicCloud`.
	Cloud string `json:"cloud,omitempty"`
	// AAD tenant of the subscription.
	TenantID string `json:"tenantId,omitempty"`
	// Subscription of the cluster.
	SubscriptionID string `json:"subscriptionId,omitempty"`
	// Resource group of the cluster.
	ResourceGroup string `json:"resourceGroup,omitempty"`
	// Location of the resource group.
	Location string `json:"location,omitempty"`
	// VNet of the cluster.
	VnetName string `json:"vnetName,omitempty"`
	// Resource group of the VNet.
	VnetResourceGroup string `json:"vnetResourceGroup,omitempty"`
	// Subnet of the cluster.
	SubnetName string `json:"subnetName,omitempty"`
	// Security group of the cluster's subnet.
	SecurityGroupName string `json:"securityGroupName,omitempty"`
	// Resource group of the security group.
	SecurityGroupResourceGroup string `json:"securityGroupResourceGroup,omitempty"`
	// Route table of the subnet.
	RouteTableName string `json:"routeTableName,omitempty"`
	// Availability set used as the load balancer backend.
	PrimaryAvailabilitySetName string `json:"primaryAvailabilitySetName,omitempty"`
	// `standard` or `vmss`.
	VMType string `json:"vmType,omitempty"`
	// Scale set used as the load balancer backend.
	PrimaryScaleSetName string `json:"primaryScaleSetName,omitempty"`
	// Client ID of the service principal.
	AADClientID string `json:"aadClientId,omitempty"`
	// Client secret of the service principal.
	AADClientSecret string `json:"aadClientSecret,omitempty" rigger:"secret"`
	// Path of the service principal's client certificate.
	AADClientCertPath string `json:"aadClientCertPath,omitempty"`
	// Password of the client certificate.
	AADClientCertPassword string `json:"aadClientCertPassword,omitempty" rigger:"secret"`
	// Retry requests with exponential backoff.
	CloudProviderBackoff bool `json:"cloudProviderBackoff,omitempty"`
	// Backoff retries.
	CloudProviderBackoffRetries int `json:"cloudProviderBackoffRetries,omitempty"`
	// Backoff exponent.
	CloudProviderBackoffExponent int `json:"cloudProviderBackoffExponent,omitempty"`
	// Backoff duration in seconds.
	CloudProviderBackoffDuration int `json:"cloudProviderBackoffDuration,omitempty"`
	// Backoff jitter.
	CloudProviderBackoffJitter int `json:"cloudProviderBackoffJitter,omitempty"`
	// Rate-limit requests.
	CloudProviderRateLimit bool `json:"cloudProviderRateLimit,omitempty"`
	// Rate limit in queries per second.
	CloudProviderRateLimitQPS int `json:"cloudProviderRateLimitQPS,omitempty"`
	// Rate limit bucket size.
	CloudProviderRateLimitBucket int `json:"cloudProviderRateLimitBucket,omitempty"`
	// Use the instance metadata service.
	UseInstanceMetadata bool `json:"useInstanceMetadata,omitempty"`
	// Authenticate with the VM's managed identity.
	UseManagedIdentityExtension bool `json:"useManagedIdentityExtension,omitempty"`
	// Client ID of a user-assigned managed identity.
	UserAssignedIdentityID string `json:"userAssignedIdentityID,omitempty"`
	// Most load balancer rules (0: 148).
	MaximumLoadBalancerRuleCount int `json:"maximumLoadBalancerRuleCount,omitempty"`
	// `basic` or `standard`.
	LoadBalancerSku string `json:"loadBalancerSku,omitempty"`
	// Keep master nodes out of the standard load balancer's backend pool.
	ExcludeMasterFromStandardLB *bool `json:"excludeMasterFromStandardLB,omitempty"`
	// Tags of shared resources, `a=b,c=d`.
	Tags string `json:"tags,omitempty"`
}

// OpenstackCloudProvider is the OpenStack cloud config.
type OpenstackCloudProvider struct {
	// The [Global] section.
	Global OpenstackGlobal `json:"global,omitempty"`
	// The [LoadBalancer] section.
	LoadBalancer OpenstackLoadBalancer `json:"load_balancer,omitempty"`
	// The [BlockStorage] section.
	BlockStorage OpenstackBlockStorage `json:"block_storage,omitempty"`
	// The [Route] section.
	Route OpenstackRoute `json:"route,omitempty"`
	// The [Metadata] section.
	Metadata OpenstackMetadata `json:"metadata,omitempty"`
}

// OpenstackGlobal is the [Global] section of the OpenStack cloud config.
type OpenstackGlobal struct {
	// Keystone URL.
	AuthURL string `json:"auth-url,omitempty"`
	// User name.
	Username string `json:"username,omitempty"`
	// User ID.
	UserID string `json:"user-id,omitempty"`
	// Password.
	Password string `json:"password,omitempty" rigger:"secret"`
	// Tenant ID.
	TenantID string `json:"tenant-id,omitempty"`
	// Tenant name.
	TenantName string `json:"tenant-name,omitempty"`
	// Trust ID.
	TrustID string `json:"trust-id,omitempty"`
	// Domain ID.
	DomainID string `json:"domain-id,omitempty"`
	// Domain name.
	DomainName string `json:"domain-name,omitempty"`
	// Region.
	Region string `json:"region,omitempty"`
	// CA file of the endpoints.
	CAFile string `json:"ca-file,omitempty"`
}

// OpenstackLoadBalancer is the [LoadBalancer] section.
type OpenstackLoadBalancer struct {
	// Load balancer API version (`v2`).
	LBVersion string `json:"lb-version,omitempty"`
	// Use Octavia.
	UseOctavia bool `json:"use-octavia,omitempty"`
	// Subnet of load balancers.
	SubnetID string `json:"subnet-id,omitempty"`
	// Network of floating IPs.
	FloatingNetworkID string `json:"floating-network-id,omitempty"`
	// Balancing method (`ROUND_ROBIN`).
	LBMethod string `json:"lb-method,omitempty"`
	// Load balancer provider.
	LBProvider string `json:"lb-provider,omitempty"`
	// Create health monitors.
	CreateMonitor bool `json:"create-monitor,omitempty"`
	// Monitor delay.
	MonitorDelay string `json:"monitor-delay,omitempty"`
	// Monitor timeout.
	MonitorTimeout string `json:"monitor-timeout,omitempty"`
	// Monitor retries.
	MonitorMaxRetries int `json:"monitor-max-retries,omitempty"`
	// Manage security groups of load balancers.
	ManageSecurityGroups bool `json:"manage-security-groups,omitempty"`
}

// OpenstackBlockStorage is the [BlockStorage] section.
type OpenstackBlockStorage struct {
	// Block storage API version (`v1`, `v2`, `auto`).
	BSVersion string `json:"bs-version,omitempty"`
	// Trust the device path Cinder reports.
	TrustDevicePath bool `json:"trust-device-path,omitempty"`
	// Ignore the volume's availability zone.
	IgnoreVolumeAZ bool `json:"ignore-volume-az,omitempty"`
}

// OpenstackRoute is the [Route] section.
type OpenstackRoute struct {
	// Router that holds the cluster's routes.
	RouterID string `json:"router-id,omitempty"`
}

// OpenstackMetadata is the [Metadata] section.
type OpenstackMetadata struct {
	// Where metadata is read from: `configDrive`, `metadataService`.
	SearchOrder string `json:"search-order,omitempty"`
	// Timeout of a metadata request in seconds.
	RequestTimeout int `json:"request-timeout,omitempty"`
}

// VsphereCloudProvider is the vSphere cloud config.
type VsphereCloudProvider struct {
	// The [Global] section.
	Global VsphereGlobal `json:"global,omitempty"`
	// [VirtualCenter] sections, by vCenter address.
	VirtualCenter map[string]VsphereVirtualCenter `json:"virtual_center,omitempty"`
	// The [Network] section.
	Network VsphereNetwork `json:"network,omitempty"`
	// The [Disk] section.
	Disk VsphereDisk `json:"disk,omitempty"`
	// The [Workspace] section.
	Workspace VsphereWorkspace `json:"workspace,omitempty"`
}

// VsphereGlobal is the [Global] section of the vSphere cloud config.
type VsphereGlobal struct {
	// vCenter user.
	User string `json:"user,omitempty"`
	// vCenter password.
	Password string `json:"password,omitempty" rigger:"secret"`
	// vCenter address.
	VCenterIP string `json:"server,omitempty"`
	// vCenter port.
	VCenterPort string `json:"port,omitempty"`
	// Skip TLS verification of vCenter.
	InsecureFlag bool `json:"insecure-flag,omitempty"`
	// Datacenter.
	Datacenter string `json:"datacenter,omitempty"`
	// Datacenters, comma-separated.
	Datacenters string `json:"datacenters,omitempty"`
	// Default datastore.
	DefaultDatastore string `json:"datastore,omitempty"`
	// Working directory of VMs.
	WorkingDir string `json:"working-dir,omitempty"`
	// SOAP round trips.
	RoundTripperCount int `json:"soap-roundtrip-count,omitempty"`
	// UUID of the VM.
	VMUUID string `json:"vm-uuid,omitempty"`
	// Name of the VM.
	VMName string `json:"vm-name,omitempty"`
}

// VsphereVirtualCenter is a [VirtualCenter] section.
type VsphereVirtualCenter struct {
	// vCenter user.
	User string `json:"user,omitempty"`
	// vCenter password.
	Password string `json:"password,omitempty" rigger:"secret"`
	// vCenter port.
	VCenterPort string `json:"port,omitempty"`
	// Datacenters, comma-separated.
	Datacenters string `json:"datacenters,omitempty"`
	// SOAP round trips.
	RoundTripperCount int `json:"soap-roundtrip-count,omitempty"`
}

// VsphereNetwork is the [Network] section.
type VsphereNetwork struct {
	// Public network of the VMs.
	PublicNetwork string `json:"public-network,omitempty"`
}

// VsphereDisk is the [Disk] section.
type VsphereDisk struct {
	// SCSI controller type.
	SCSIControllerType string `json:"scsicontrollertype,omitempty"`
}

// VsphereWorkspace is the [Workspace] section.
type VsphereWorkspace struct {
	// vCenter address.
	VCenterIP string `json:"server,omitempty"`
	// Datacenter.
	Datacenter string `json:"datacenter,omitempty"`
	// VM folder.
	Folder string `json:"folder,omitempty"`
	// Default datastore.
	DefaultDatastore string `json:"default-datastore,omitempty"`
	// Resource pool path.
	ResourcePoolPath string `json:"resourcepool-path,omitempty"`
}

// HarvesterCloudProvider is the Harvester cloud config.
type HarvesterCloudProvider struct {
	// The kubeconfig of the Harvester cluster, inline.
	CloudConfig string `json:"cloud_config,omitempty" rigger:"secret"`
}
