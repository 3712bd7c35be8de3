package spec

// AciNetworkProvider holds the Cisco ACI CNI options. The keys and their
// meaning are those of RKE's ACI reference; rigger passes them to the ACI
// add-on unchanged. Every value is a string unless shown otherwise.
type AciNetworkProvider struct {
	// ACI option `system_id`.
	SystemIdentifier string `json:"system_id,omitempty"`
	// ACI option `apic_hosts`.
	ApicHosts []string `json:"apic_hosts,omitempty"`
	// ACI option `token`.
	Token string `json:"token,omitempty" rigger:"secret"`
	// ACI option `apic_user_name`.
	ApicUserName string `json:"apic_user_name,omitempty"`
	// ACI option `apic_user_key`.
	ApicUserKey string `json:"apic_user_key,omitempty" rigger:"secret"`
	// ACI option `apic_user_crt`.
	ApicUserCrt string `json:"apic_user_crt,omitempty"`
	// ACI option `apic_refresh_time`.
	ApicRefreshTime string `json:"apic_refresh_time,omitempty"`
	// ACI option `vmm_domain`.
	VmmDomain string `json:"vmm_domain,omitempty"`
	// ACI option `vmm_controller`.
	VmmController string `json:"vmm_controller,omitempty"`
	// ACI option `encap_type`.
	EncapType string `json:"encap_type,omitempty"`
	// ACI option `node_subnet`.
	NodeSubnet string `json:"node_subnet,omitempty"`
	// ACI option `mcast_range_start`.
	McastRangeStart string `json:"mcast_range_start,omitempty"`
	// ACI option `mcast_range_end`.
	McastRangeEnd string `json:"mcast_range_end,omitempty"`
	// ACI option `aep`.
	AEP string `json:"aep,omitempty"`
	// ACI option `vrf_name`.
	VRFName string `json:"vrf_name,omitempty"`
	// ACI option `vrf_tenant`.
	VRFTenant string `json:"vrf_tenant,omitempty"`
	// ACI option `l3out`.
	L3Out string `json:"l3out,omitempty"`
	// ACI option `l3out_external_networks`.
	L3OutExternalNetworks []string `json:"l3out_external_networks,omitempty"`
	// ACI option `extern_dynamic`.
	DynamicExternalSubnet string `json:"extern_dynamic,omitempty"`
	// ACI option `extern_static`.
	StaticExternalSubnet string `json:"extern_static,omitempty"`
	// ACI option `node_svc_subnet`.
	ServiceGraphSubnet string `json:"node_svc_subnet,omitempty"`
	// ACI option `kube_api_vlan`.
	KubeAPIVlan string `json:"kube_api_vlan,omitempty"`
	// ACI option `service_vlan`.
	ServiceVlan string `json:"service_vlan,omitempty"`
	// ACI option `infra_vlan`.
	InfraVlan string `json:"infra_vlan,omitempty"`
	// ACI option `tenant`.
	Tenant string `json:"tenant,omitempty"`
	// ACI option `ovs_memory_limit`.
	OVSMemoryLimit string `json:"ovs_memory_limit,omitempty"`
	// ACI option `ovs_memory_request`.
	OVSMemoryRequest string `json:"ovs_memory_request,omitempty"`
	// ACI option `image_pull_policy`.
	ImagePullPolicy string `json:"image_pull_policy,omitempty"`
	// ACI option `image_pull_secret`.
	ImagePullSecret string `json:"image_pull_secret,omitempty"`
	// ACI option `service_monitor_interval`.
	ServiceMonitorInterval string `json:"service_monitor_interval,omitempty"`
	// ACI option `pbr_tracking_non_snat`.
	PBRTrackingNonSnat string `json:"pbr_tracking_non_snat,omitempty"`
	// ACI option `install_istio`.
	InstallIstio string `json:"install_istio,omitempty"`
	// ACI option `istio_profile`.
	IstioProfile string `json:"istio_profile,omitempty"`
	// ACI option `drop_log_enable`.
	DropLogEnable string `json:"drop_log_enable,omitempty"`
	// ACI option `controller_log_level`.
	ControllerLogLevel string `json:"controller_log_level,omitempty"`
	// ACI option `host_agent_log_level`.
	HostAgentLogLevel string `json:"host_agent_log_level,omitempty"`
	// ACI option `opflex_log_level`.
	OpflexAgentLogLevel string `json:"opflex_log_level,omitempty"`
	// ACI option `use_aci_cni_priority_class`.
	UseAciCniPriorityClass string `json:"use_aci_cni_priority_class,omitempty"`
	// ACI option `no_priority_class`.
	NoPriorityClass string `json:"no_priority_class,omitempty"`
	// ACI option `max_nodes_svc_graph`.
	MaxNodesSvcGraph string `json:"max_nodes_svc_graph,omitempty"`
	// ACI option `snat_contract_scope`.
	SnatContractScope string `json:"snat_contract_scope,omitempty"`
	// ACI option `pod_subnet_chunk_size`.
	PodSubnetChunkSize string `json:"pod_subnet_chunk_size,omitempty"`
	// ACI option `enable_endpoint_slice`.
	EnableEndpointSlice string `json:"enable_endpoint_slice,omitempty"`
	// ACI option `snat_namespace`.
	SnatNamespace string `json:"snat_namespace,omitempty"`
	// ACI option `ep_registry`.
	EpRegistry string `json:"ep_registry,omitempty"`
	// ACI option `opflex_mode`.
	OpflexMode string `json:"opflex_mode,omitempty"`
	// ACI option `snat_port_range_start`.
	SnatPortRangeStart string `json:"snat_port_range_start,omitempty"`
	// ACI option `snat_port_range_end`.
	SnatPortRangeEnd string `json:"snat_port_range_end,omitempty"`
	// ACI option `snat_ports_per_node`.
	SnatPortsPerNode string `json:"snat_ports_per_node,omitempty"`
	// ACI option `opflex_client_ssl`.
	OpflexClientSSL string `json:"opflex_client_ssl,omitempty"`
	// ACI option `use_privileged_container`.
	UsePrivilegedContainer string `json:"use_privileged_container,omitempty"`
	// ACI option `use_host_netns_volume`.
	UseHostNetnsVolume string `json:"use_host_netns_volume,omitempty"`
	// ACI option `use_opflex_server_volume`.
	UseOpflexServerVolume string `json:"use_opflex_server_volume,omitempty"`
	// ACI option `subnet_domain_name`.
	SubnetDomainName string `json:"subnet_domain_name,omitempty"`
	// ACI option `kafka_brokers`.
	KafkaBrokers []string `json:"kafka_brokers,omitempty"`
	// ACI option `kafka_client_crt`.
	KafkaClientCrt string `json:"kafka_client_crt,omitempty"`
	// ACI option `kafka_client_key`.
	KafkaClientKey string `json:"kafka_client_key,omitempty" rigger:"secret"`
	// ACI option `capic`.
	CApic string `json:"capic,omitempty"`
	// ACI option `use_aci_anywhere_crd`.
	UseAciAnywhereCRD string `json:"use_aci_anywhere_crd,omitempty"`
	// ACI option `overlay_vrf_name`.
	OverlayVRFName string `json:"overlay_vrf_name,omitempty"`
	// ACI option `gbp_pod_subnet`.
	GbpPodSubnet string `json:"gbp_pod_subnet,omitempty"`
	// ACI option `run_gbp_container`.
	RunGbpContainer string `json:"run_gbp_container,omitempty"`
	// ACI option `run_opflex_server_container`.
	RunOpflexServerContainer string `json:"run_opflex_server_container,omitempty"`
	// ACI option `opflex_server_port`.
	OpflexServerPort string `json:"opflex_server_port,omitempty"`
	// ACI option `duration_wait_for_network`.
	DurationWaitForNetwork string `json:"duration_wait_for_network,omitempty"`
	// ACI option `disable_wait_for_network`.
	DisableWaitForNetwork string `json:"disable_wait_for_network,omitempty"`
	// ACI option `apic_subscription_delay`.
	ApicSubscriptionDelay string `json:"apic_subscription_delay,omitempty"`
	// ACI option `apic_refresh_ticker_adjust`.
	ApicRefreshTickerAdjust string `json:"apic_refresh_ticker_adjust,omitempty"`
	// ACI option `disable_periodic_snat_global_info_sync`.
	DisablePeriodicSnatGlobalInfoSync string `json:"disable_periodic_snat_global_info_sync,omitempty"`
	// ACI option `opflex_device_delete_timeout`.
	OpflexDeviceDeleteTimeout string `json:"opflex_device_delete_timeout,omitempty"`
	// ACI option `mtu_head_room`.
	MTUHeadRoom string `json:"mtu_head_room,omitempty"`
	// ACI option `node_pod_if_enable`.
	NodePodIfEnable string `json:"node_pod_if_enable,omitempty"`
	// ACI option `sriov_enable`.
	SriovEnable string `json:"sriov_enable,omitempty"`
	// ACI option `multus_disable`.
	MultusDisable string `json:"multus_disable,omitempty"`
	// ACI option `use_cluster_role`.
	UseClusterRole string `json:"use_cluster_role,omitempty"`
	// ACI option `no_wait_for_service_ep_readiness`.
	NoWaitForServiceEpReadiness string `json:"no_wait_for_service_ep_readiness,omitempty"`
	// ACI option `add_external_subnets_to_rdconfig`.
	AddExternalSubnetsToRdconfig string `json:"add_external_subnets_to_rdconfig,omitempty"`
	// ACI option `service_graph_endpoint_add_delay`.
	ServiceGraphEndpointAddDelay string `json:"service_graph_endpoint_add_delay,omitempty"`
	// ACI option `service_graph_endpoint_add_services`.
	ServiceGraphEndpointAddServices []map[string]string `json:"service_graph_endpoint_add_services,omitempty"`
	// ACI option `hpp_optimization`.
	HppOptimization string `json:"hpp_optimization,omitempty"`
	// ACI option `sleep_time_snat_global_info_sync`.
	SleepTimeSnatGlobalInfoSync string `json:"sleep_time_snat_global_info_sync,omitempty"`
	// ACI option `opflex_agent_opflex_asyncjson_enabled`.
	OpflexAgentOpflexAsyncjsonEnabled string `json:"opflex_agent_opflex_asyncjson_enabled,omitempty"`
	// ACI option `opflex_agent_ovs_asyncjson_enabled`.
	OpflexAgentOvsAsyncjsonEnabled string `json:"opflex_agent_ovs_asyncjson_enabled,omitempty"`
	// ACI option `opflex_agent_policy_retry_delay_timer`.
	OpflexAgentPolicyRetryDelayTimer string `json:"opflex_agent_policy_retry_delay_timer,omitempty"`
	// ACI option `aci_multipod`.
	AciMultipod string `json:"aci_multipod,omitempty"`
	// ACI option `opflex_device_reconnect_wait_timeout`.
	OpflexDeviceReconnectWaitTimeout string `json:"opflex_device_reconnect_wait_timeout,omitempty"`
	// ACI option `aci_multipod_ubuntu`.
	AciMultipodUbuntu string `json:"aci_multipod_ubuntu,omitempty"`
	// ACI option `dhcp_renew_max_retry_count`.
	DhcpRenewMaxRetryCount string `json:"dhcp_renew_max_retry_count,omitempty"`
	// ACI option `dhcp_delay`.
	DhcpDelay string `json:"dhcp_delay,omitempty"`
	// ACI option `use_system_node_priority_class`.
	UseSystemNodePriorityClass string `json:"use_system_node_priority_class,omitempty"`
	// ACI option `aci_containers_controller_memory_request`.
	AciContainersControllerMemoryRequest string `json:"aci_containers_controller_memory_request,omitempty"`
	// ACI option `aci_containers_controller_memory_limit`.
	AciContainersControllerMemoryLimit string `json:"aci_containers_controller_memory_limit,omitempty"`
	// ACI option `aci_containers_host_memory_request`.
	AciContainersHostMemoryRequest string `json:"aci_containers_host_memory_request,omitempty"`
	// ACI option `aci_containers_host_memory_limit`.
	AciContainersHostMemoryLimit string `json:"aci_containers_host_memory_limit,omitempty"`
	// ACI option `mcast_daemon_memory_request`.
	McastDaemonMemoryRequest string `json:"mcast_daemon_memory_request,omitempty"`
	// ACI option `mcast_daemon_memory_limit`.
	McastDaemonMemoryLimit string `json:"mcast_daemon_memory_limit,omitempty"`
	// ACI option `opflex_agent_memory_request`.
	OpflexAgentMemoryRequest string `json:"opflex_agent_memory_request,omitempty"`
	// ACI option `opflex_agent_memory_limit`.
	OpflexAgentMemoryLimit string `json:"opflex_agent_memory_limit,omitempty"`
	// ACI option `aci_containers_memory_request`.
	AciContainersMemoryRequest string `json:"aci_containers_memory_request,omitempty"`
	// ACI option `aci_containers_memory_limit`.
	AciContainersMemoryLimit string `json:"aci_containers_memory_limit,omitempty"`
	// ACI option `opflex_agent_statistics`.
	OpflexAgentStatistics string `json:"opflex_agent_statistics,omitempty"`
	// ACI option `add_external_contract_to_default_epg`.
	AddExternalContractToDefaultEpg string `json:"add_external_contract_to_default_epg,omitempty"`
	// ACI option `enable_opflex_agent_reconnect`.
	EnableOpflexAgentReconnect string `json:"enable_opflex_agent_reconnect,omitempty"`
	// ACI option `opflex_openssl_compat`.
	OpflexOpensslCompat string `json:"opflex_openssl_compat,omitempty"`
	// ACI option `node_snat_redirect_exclude`.
	NodeSnatRedirectExclude []map[string]string `json:"node_snat_redirect_exclude,omitempty"`
	// ACI option `toleration_seconds`.
	TolerationSeconds string `json:"toleration_seconds,omitempty"`
	// ACI option `disable_hpp_rendering`.
	DisableHppRendering string `json:"disable_hpp_rendering,omitempty"`
	// ACI option `apic_connection_retry_limit`.
	ApicConnectionRetryLimit string `json:"apic_connection_retry_limit,omitempty"`
	// ACI option `taint_not_ready_node`.
	TaintNotReadyNode string `json:"taint_not_ready_node,omitempty"`
	// ACI option `drop_log_disable_events`.
	DropLogDisableEvents string `json:"drop_log_disable_events,omitempty"`
	// ACI option `drop_log_opflex_redirect_drop_logs`.
	DropLogOpflexRedirectDropLogs string `json:"drop_log_opflex_redirect_drop_logs,omitempty"`
	// ACI option `opflex_startup_enabled`.
	OpflexStartupEnabled string `json:"opflex_startup_enabled,omitempty"`
	// ACI option `opflex_startup_policy_duration`.
	OpflexStartupPolicyDuration string `json:"opflex_startup_policy_duration,omitempty"`
	// ACI option `opflex_startup_resolve_aft_conn`.
	OpflexStartupResolveAftConn string `json:"opflex_startup_resolve_aft_conn,omitempty"`
	// ACI option `opflex_switch_sync_delay`.
	OpflexSwitchSyncDelay string `json:"opflex_switch_sync_delay,omitempty"`
	// ACI option `opflex_switch_sync_dynamic`.
	OpflexSwitchSyncDynamic string `json:"opflex_switch_sync_dynamic,omitempty"`
	// ACI option `unknown_mac_unicast_action`.
	UnknownMacUnicastAction string `json:"unknown_mac_unicast_action,omitempty"`
	// ACI option `enable_hpp_direct`.
	EnableHppDirect string `json:"enable_hpp_direct,omitempty"`
	// ACI option `opflex_agent_reset_wait_delay`.
	OpflexAgentResetWaitDelay string `json:"opflex_agent_reset_wait_delay,omitempty"`
	// ACI option `proactive_conf`.
	ProactiveConf string `json:"proactive_conf,omitempty"`
	// ACI option `epg_resolve_prioritize` (RKE v1.8.14's default `true`).
	EpgResolvePrioritize string `json:"epg_resolve_prioritize,omitempty"`
	// ACI option `force_ep_undeclares` (RKE v1.8.14's default `true`).
	ForceEpUndeclares string `json:"force_ep_undeclares,omitempty"`
	// ACI option `enable_apic_request_retry_delay` (RKE v1.8.14's default `true`).
	EnableApicRequestRetryDelay string `json:"enable_apic_request_retry_delay,omitempty"`
	// ACI option `apic_request_retry_delay` (RKE v1.8.14's default `2`).
	ApicRequestRetryDelay string `json:"apic_request_retry_delay,omitempty"`
}
