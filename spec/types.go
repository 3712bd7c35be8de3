package spec

// The schema. Field names are the cluster.yml keys (the json tags); each
// field's doc comment is its entry in docs/cluster-yml.md, which
// TestReferenceUpToDate regenerates from this file. A `rigger:"secret"` tag
// marks a value that is never printed, logged or written to status;
// `rigger:"secret-env"` a list of NAME=value whose values are not (the
// names are). See redact.go.

// Cluster is a whole cluster.yml.
type Cluster struct {
	// Name of the cluster, used in kubeconfig contexts and in the labels rigger puts on containers.
	ClusterName string `json:"cluster_name,omitempty"`
	// The machines of the cluster and their roles.
	Nodes []Node `json:"nodes,omitempty"`
	// Settings of the Kubernetes components rigger runs as containers.
	Services Services `json:"services,omitempty"`
	// The CNI network plugin and its options.
	Network Network `json:"network,omitempty"`
	// How users and components authenticate to the API server.
	Authentication Authentication `json:"authentication,omitempty"`
	// How the API server authorizes requests.
	Authorization Authorization `json:"authorization,omitempty"`
	// Kubernetes version to run, 1.24 or later, written as RKE writes it (`v1.32.3-rancher1-1`). A version of rigger's version table, which is RKE v1.8.14's and then rigger's own from 1.33 to 1.37 (`rigger config versions` lists it), fills every `system_images` key left empty; so does any patch release of 1.33 to 1.37 written as upstream writes it (`v1.35.12`), each Kubernetes component then running upstream's image of it. Any other version (`v1.31.4`, or `v1.31.5` for RKE's `v1.31.5-rancher1-1`) needs `system_images` set for every component the cluster runs, as in RKE.
	KubernetesVersion string `json:"kubernetes_version,omitempty"`
	// Container images of the cluster's components. Keys left empty take the image of `kubernetes_version` in the version table, prefixed with the URL of the first private registry marked `is_default`, as in RKE. The components' default flags follow the version the `kubernetes` image's tag names (RKE's rule), so `v1.31.4` runs 1.31's flags whatever `kubernetes_version` says.
	SystemImages SystemImages `json:"system_images,omitempty"`
	// Registries to pull images from, with credentials, used as RKE uses them: every image rigger pulls on a node (components, helpers, snapshots) is pulled with the credentials of its registry (the Docker API's registry auth), and the kubelet gets them all for its pulls of pod images: rke-tools' kubelet entrypoint writes them to `/var/lib/kubelet/config.json` (so only with `enable_cri_dockerd: true`). An image's registry is its host (`docker.io` for an image that names none), or, when its path has more than two parts, its host and path without the last two (`repo.com/foo/bar` for `repo.com/foo/bar/rancher/rke-tools:v0.1.111`); an image of no registry listed is pulled without credentials. Of two entries with the same `url`, the last counts, as in RKE (`validate` warns).
	PrivateRegistries []PrivateRegistry `json:"private_registries,omitempty"`
	// Default path of the private SSH key for nodes that set none.
	SSHKeyPath string `json:"ssh_key_path,omitempty"`
	// Default path of an OpenSSH user certificate for nodes that set none.
	SSHCertPath string `json:"ssh_cert_path,omitempty"`
	// Authenticate with the keys of the running ssh-agent (SSH_AUTH_SOCK) on every node.
	SSHAgentAuth bool `json:"ssh_agent_auth,omitempty"`
	// A jump host through which every node is reached.
	BastionHost *BastionHost `json:"bastion_host,omitempty"`
	// Read and ignored, as RKE v1.8.14's `rke up` ignores it: it replaces the key with its `--ignore-docker-version` flag. rigger does the same: `plan`, `apply` and `serve` check each node's Docker version (its major.minor version must be on RKE v1.8.14's list for the cluster's Kubernetes minor version; `20.10.x` accepts `20.10.24+dfsg1`) and refuse the plan, naming each node, its version and the list, unless given `--ignore-docker-version`. `validate` warns when the file sets `true`. How rigger checks: [versions.md](versions.md#docker-versions).
	IgnoreDockerVersion *bool `json:"ignore_docker_version,omitempty"`
	// Run the kubelet against cri-dockerd (Kubernetes 1.24 and later need a CRI; RKE's default there is true).
	EnableCRIDockerd *bool `json:"enable_cri_dockerd,omitempty"`
	// Address cri-dockerd's streaming server listens on.
	CRIDockerdStreamServerAddress string `json:"cri_dockerd_stream_server_address,omitempty"`
	// Port of cri-dockerd's streaming server.
	CRIDockerdStreamServerPort string `json:"cri_dockerd_stream_server_port,omitempty"`
	// The ingress controller deployed as an add-on.
	Ingress Ingress `json:"ingress,omitempty"`
	// The cluster DNS add-on.
	DNS *DNS `json:"dns,omitempty"`
	// The metrics add-on.
	Monitoring Monitoring `json:"monitoring,omitempty"`
	// Cloud provider integration of the kubelet and controller manager.
	CloudProvider CloudProvider `json:"cloud_provider,omitempty"`
	// YAML manifests applied to the cluster after it is up.
	Addons string `json:"addons,omitempty" rigger:"secret-manifests"`
	// Paths or URLs of more add-on manifests.
	AddonsInclude []string `json:"addons_include,omitempty"`
	// Seconds rigger waits for each add-on to be ready (rolled out, as kstatus says) after applying it, measured from the last progress of its objects and their pods ([addons.md](addons.md#readiness)); RKE waited this long for the add-on's deploy job.
	AddonJobTimeout int `json:"addon_job_timeout,omitempty"`
	// Prefix of every host path RKE uses on the nodes (for distributions with a read-only /). Not supported by rigger: refused by `validate`.
	PrefixPath string `json:"prefix_path,omitempty"`
	// Prefix of host paths on Windows nodes (RKE's; rigger runs no Windows nodes and does not use it).
	WindowsPrefixPath string `json:"win_prefix_path,omitempty"`
	// How nodes are upgraded: how many at a time, and whether they are drained.
	UpgradeStrategy *UpgradeStrategy `json:"upgrade_strategy,omitempty"`
	// Restore etcd from a snapshot on the next reconcile.
	Restore Restore `json:"restore,omitempty"`
	// Rotate certificates once, on the next apply: every certificate of the listed services (or all), or with `cacertificates` the CAs and everything under them; components restart one node at a time. rigger records the request in its state directory and rotates no more while it stays as it is; remove the block and add it again to rotate again (see docs/certificates.md; `rigger cert rotate` does the same from the command line).
	RotateCertificates *RotateCertificates `json:"rotate_certificates,omitempty"`
	// Rotate the secrets encryption key rigger generates, once: a new key is added, made the one that encrypts, every Secret is rewritten, then the old key is dropped (see docs/secrets-encryption.md). While this stays true no further rotation is made; remove it (or set false) so that a later true rotates again. Needs `secrets_encryption_config.enabled` without `custom_config`.
	RotateEncryptionKey bool `json:"rotate_encryption_key,omitempty"`
	// Settings of rigger itself (not in RKE): SSH host-key checks, parallelism, safety guards, suspension.
	Rigger Rigger `json:"rigger,omitempty"`
}

// Node is one machine of the cluster.
type Node struct {
	// Address rigger reaches the node at: an IP or a resolvable name.
	Address string `json:"address,omitempty"`
	// SSH port of the node.
	Port string `json:"port,omitempty"`
	// Address the cluster's components use to talk to each other. Default: `address`.
	InternalAddress string `json:"internal_address,omitempty"`
	// Roles of the node: any of `etcd`, `controlplane`, `worker`.
	Role []string `json:"role,omitempty"`
	// Name of the node in Kubernetes (an RFC 1123 name). Default: `address` in lower case.
	HostnameOverride string `json:"hostname_override,omitempty"`
	// SSH user; it needs access to the Docker socket and nothing else.
	User string `json:"user,omitempty"`
	// Path of the Docker socket on the node.
	DockerSocket string `json:"docker_socket,omitempty"`
	// Authenticate with the keys of the running ssh-agent (SSH_AUTH_SOCK).
	SSHAgentAuth bool `json:"ssh_agent_auth,omitempty"`
	// Private SSH key, inline (PEM). Wins over `ssh_key_path`.
	SSHKey string `json:"ssh_key,omitempty" rigger:"secret"`
	// Path of the private SSH key (`~` is expanded). Default: the cluster's `ssh_key_path`.
	SSHKeyPath string `json:"ssh_key_path,omitempty"`
	// OpenSSH user certificate for the key, inline.
	SSHCert string `json:"ssh_cert,omitempty"`
	// Path of the OpenSSH user certificate. Default: the cluster's `ssh_cert_path`.
	SSHCertPath string `json:"ssh_cert_path,omitempty"`
	// Kubernetes labels of the node's Node object.
	Labels map[string]string `json:"labels,omitempty"`
	// Kubernetes taints of the node's Node object.
	Taints []Taint `json:"taints,omitempty"`
	// Name of the node in Rancher's node driver (kept for compatibility; unused by rigger).
	NodeName string `json:"nodeName,omitempty"`
	// How rigger reaches the node: `ssh` (the Docker socket tunnelled over SSH) or `agent` (the node runs `rigger agent`, which dials out to `rigger serve`).
	Transport string `json:"transport,omitempty"`
}

// Taint is a Kubernetes taint.
type Taint struct {
	// Taint key.
	Key string `json:"key,omitempty"`
	// Taint value.
	Value string `json:"value,omitempty"`
	// One of `NoSchedule`, `PreferNoSchedule`, `NoExecute`.
	Effect string `json:"effect,omitempty"`
}

// BastionHost is a jump host.
type BastionHost struct {
	// Address of the jump host.
	Address string `json:"address,omitempty"`
	// SSH port of the jump host.
	Port string `json:"port,omitempty"`
	// SSH user on the jump host.
	User string `json:"user,omitempty"`
	// Authenticate to the jump host with the ssh-agent's keys.
	SSHAgentAuth bool `json:"ssh_agent_auth,omitempty"`
	// Private SSH key for the jump host, inline.
	SSHKey string `json:"ssh_key,omitempty" rigger:"secret"`
	// Path of the private SSH key for the jump host.
	SSHKeyPath string `json:"ssh_key_path,omitempty"`
	// OpenSSH user certificate for the jump host, inline.
	SSHCert string `json:"ssh_cert,omitempty"`
	// Path of the OpenSSH user certificate for the jump host.
	SSHCertPath string `json:"ssh_cert_path,omitempty"`
	// Ignore HTTP(S)_PROXY and NO_PROXY when connecting to the jump host.
	IgnoreProxyEnvVars bool `json:"ignore_proxy_env_vars,omitempty"`
}

// PrivateRegistry is a registry images are pulled from.
type PrivateRegistry struct {
	// Registry host (and port), e.g. `registry.example.com:5000`, with a path when the images are below one (`repo.com/foo/bar`). Empty is Docker Hub (`docker.io`), as in RKE.
	URL string `json:"url,omitempty"`
	// Registry user.
	User string `json:"user,omitempty"`
	// Registry password.
	Password string `json:"password,omitempty" rigger:"secret"`
	// Prefix every image the version table gives (the components', the helpers' and the add-ons') with this `url` and a slash, as RKE does, whatever registry the image names; images set in `system_images` are kept as written. A registry without `url` prefixes nothing, as in RKE; when several are marked, the first one counts (as in RKE), with a warning.
	IsDefault bool `json:"is_default,omitempty"`
	// Get credentials for Amazon ECR from these AWS keys. Not supported by rigger: refused by `validate`; give the registry's `user` and `password` instead.
	ECRCredentialPlugin *ECRCredentialPlugin `json:"ecr_credential_plugin,omitempty"`
}

// ECRCredentialPlugin holds AWS credentials for Amazon ECR.
type ECRCredentialPlugin struct {
	// AWS access key ID.
	AWSAccessKeyID string `json:"aws_access_key_id,omitempty"`
	// AWS secret access key.
	AWSSecretAccessKey string `json:"aws_secret_access_key,omitempty" rigger:"secret"`
	// AWS session token.
	AWSSessionToken string `json:"aws_session_token,omitempty" rigger:"secret"`
}

// SystemImages names the image of each component.
type SystemImages struct {
	// etcd.
	Etcd string `json:"etcd,omitempty"`
	// Small utility image for one-shot tasks on nodes.
	Alpine string `json:"alpine,omitempty"`
	// Local TCP load balancer to the API servers on nodes without the controlplane role.
	NginxProxy string `json:"nginx_proxy,omitempty"`
	// Writes certificates and kubeconfigs on nodes.
	CertDownloader string `json:"cert_downloader,omitempty"`
	// Sidecar that prepares host paths for the Kubernetes components.
	KubernetesServicesSidecar string `json:"kubernetes_services_sidecar,omitempty"`
	// kube-dns.
	KubeDNS string `json:"kubedns,omitempty"`
	// dnsmasq of kube-dns.
	DNSmasq string `json:"dnsmasq,omitempty"`
	// Sidecar of kube-dns.
	KubeDNSSidecar string `json:"kubedns_sidecar,omitempty"`
	// Autoscaler of kube-dns.
	KubeDNSAutoscaler string `json:"kubedns_autoscaler,omitempty"`
	// CoreDNS.
	CoreDNS string `json:"coredns,omitempty"`
	// Autoscaler of CoreDNS.
	CoreDNSAutoscaler string `json:"coredns_autoscaler,omitempty"`
	// NodeLocal DNSCache.
	Nodelocal string `json:"nodelocal,omitempty"`
	// Image with every Kubernetes binary (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy) in /usr/local/bin, as RKE's hyperkube. Versions of rigger's own table (1.33 to 1.37) leave it empty and run each component from an image of its own; set, it runs all five, on every version, as in RKE.
	Kubernetes string `json:"kubernetes,omitempty"`
	// Flannel.
	Flannel string `json:"flannel,omitempty"`
	// Flannel CNI installer.
	FlannelCNI string `json:"flannel_cni,omitempty"`
	// Calico node.
	CalicoNode string `json:"calico_node,omitempty"`
	// Calico CNI installer.
	CalicoCNI string `json:"calico_cni,omitempty"`
	// Calico controllers.
	CalicoControllers string `json:"calico_controllers,omitempty"`
	// calicoctl.
	CalicoCtl string `json:"calico_ctl,omitempty"`
	// Calico FlexVolume driver.
	CalicoFlexVol string `json:"calico_flexvol,omitempty"`
	// Canal node (Calico).
	CanalNode string `json:"canal_node,omitempty"`
	// Canal CNI installer.
	CanalCNI string `json:"canal_cni,omitempty"`
	// Canal controllers.
	CanalControllers string `json:"canal_controllers,omitempty"`
	// Canal's flannel.
	CanalFlannel string `json:"canal_flannel,omitempty"`
	// Canal FlexVolume driver.
	CanalFlexVol string `json:"canal_flexvol,omitempty"`
	// Weave node.
	WeaveNode string `json:"weave_node,omitempty"`
	// Weave CNI installer.
	WeaveCNI string `json:"weave_cni,omitempty"`
	// Pause image of every pod.
	PodInfraContainer string `json:"pod_infra_container,omitempty"`
	// Ingress controller.
	Ingress string `json:"ingress,omitempty"`
	// Default backend of the ingress controller.
	IngressBackend string `json:"ingress_backend,omitempty"`
	// Admission webhook of the ingress controller.
	IngressWebhook string `json:"ingress_webhook,omitempty"`
	// metrics-server.
	MetricsServer string `json:"metrics_server,omitempty"`
	// Pause image on Windows nodes.
	WindowsPodInfraContainer string `json:"windows_pod_infra_container,omitempty"`
	// Tigera operator (Calico installed by its operator). Not in RKE v1.8.14's table, which never fills it.
	TigeraOperator string `json:"calico_tigera_operator,omitempty"`
	// Cisco ACI CNI deployer.
	AciCniDeployContainer string `json:"aci_cni_deploy_container,omitempty"`
	// Cisco ACI host agent.
	AciHostContainer string `json:"aci_host_container,omitempty"`
	// Cisco ACI opflex agent.
	AciOpflexContainer string `json:"aci_opflex_container,omitempty"`
	// Cisco ACI multicast daemon.
	AciMcastContainer string `json:"aci_mcast_container,omitempty"`
	// Cisco ACI Open vSwitch.
	AciOpenvSwitchContainer string `json:"aci_ovs_container,omitempty"`
	// Cisco ACI controller.
	AciControllerContainer string `json:"aci_controller_container,omitempty"`
	// Cisco ACI GBP server.
	AciGbpServerContainer string `json:"aci_gbp_server_container,omitempty"`
	// Cisco ACI opflex server.
	AciOpflexServerContainer string `json:"aci_opflex_server_container,omitempty"`
}

// Services holds the settings of each Kubernetes component.
type Services struct {
	// etcd, on nodes with the etcd role.
	Etcd ETCDService `json:"etcd,omitempty"`
	// kube-apiserver, on controlplane nodes.
	KubeAPI KubeAPIService `json:"kube-api,omitempty"`
	// kube-controller-manager, on controlplane nodes.
	KubeController KubeControllerService `json:"kube-controller,omitempty"`
	// kube-scheduler, on controlplane nodes.
	Scheduler BaseService `json:"scheduler,omitempty"`
	// kubelet, on every node.
	Kubelet KubeletService `json:"kubelet,omitempty"`
	// kube-proxy, on every node.
	Kubeproxy BaseService `json:"kubeproxy,omitempty"`
}

// BaseService holds what every component's container accepts.
type BaseService struct {
	// Ignored, as RKE v1.8.14 ignores it ("We don't accept per service images anymore"): the container runs `system_images.kubernetes` (`system_images.etcd` for etcd) whatever this says. Default: that image. `validate` warns when it names another one; set `system_images` instead.
	Image string `json:"image,omitempty"`
	// Extra command-line flags, `flag: value` (without the leading `--`). They override rigger's own.
	ExtraArgs map[string]string `json:"extra_args,omitempty"`
	// Extra flags that are given more than once, `flag: [value, value]`.
	ExtraArgsArray map[string][]string `json:"extra_args_array,omitempty"`
	// Extra bind mounts of the container, `host-path:container-path[:options]`.
	ExtraBinds []string `json:"extra_binds,omitempty"`
	// Extra environment variables of the container, `NAME=value`.
	ExtraEnv []string `json:"extra_env,omitempty" rigger:"secret-env"`
	// Extra flags on Windows nodes.
	WindowsExtraArgs map[string]string `json:"win_extra_args,omitempty"`
	// Extra repeated flags on Windows nodes.
	WindowsExtraArgsArray map[string][]string `json:"win_extra_args_array,omitempty"`
	// Extra bind mounts on Windows nodes.
	WindowsExtraBinds []string `json:"win_extra_binds,omitempty"`
	// Extra environment variables on Windows nodes.
	WindowsExtraEnv []string `json:"win_extra_env,omitempty" rigger:"secret-env"`
}

// ETCDService is etcd's settings.
type ETCDService struct {
	BaseService `json:",inline"`
	// URLs of an external etcd cluster to use instead of etcd nodes.
	ExternalURLs []string `json:"external_urls,omitempty"`
	// CA certificate of the external etcd (PEM), written to controlplane nodes as /etc/kubernetes/ssl/kube-etcd-client-ca.pem (the API server's --etcd-cafile).
	CACert string `json:"ca_cert,omitempty"`
	// Client certificate for the external etcd (PEM), written as /etc/kubernetes/ssl/kube-etcd-client.pem (--etcd-certfile).
	Cert string `json:"cert,omitempty"`
	// Client key of cert (PEM), written as /etc/kubernetes/ssl/kube-etcd-client-key.pem, mode 0600 (--etcd-keyfile).
	Key string `json:"key,omitempty" rigger:"secret"`
	// Key prefix in the external etcd.
	Path string `json:"path,omitempty"`
	// User ID etcd's container runs as.
	UID int `json:"uid,omitempty"`
	// Group ID etcd's container runs as.
	GID int `json:"gid,omitempty"`
	// Run the `etcd-rolling-snapshots` container on every etcd node, as RKE does (default true): it takes, verifies, uploads and retains the scheduled snapshots of `backup_config` without `rigger serve`. It runs in the image RKE runs it in, `system_images.alpine` (rke-tools, which every RKE node has), with the running rigger's own static binary copied into it (a new rigger binary replaces the container); or in rigger's image, when `rigger.image` (or a `system_images.cert_downloader` whose repository is named `rigger`, such as `rigger/rigger:v1`) names it. It runs without any Linux capability and cannot gain one (as root, it owns the Docker socket and the files it reads). `false` leaves the schedule to `rigger serve`; `backup_config.enabled: false` turns the schedule off everywhere.
	Snapshot *bool `json:"snapshot,omitempty"`
	// How long scheduled snapshots are kept, as a duration (RKE's older setting). Used only when `backup_config` is null or absent, as in RKE (default then `72h`): `backup_config.retention` becomes the number of snapshots that age holds (`24h` with `creation: 6h`: 4). Ignored, with a warning, when `backup_config` is set.
	Retention string `json:"retention,omitempty"`
	// How often scheduled snapshots are taken, as a duration (RKE's older setting). Used only when `backup_config` is null or absent, as in RKE (default then `12h`): it becomes `backup_config.interval_hours`, in whole hours (rounded up, with a warning). Ignored, with a warning, when `backup_config` is set.
	Creation string `json:"creation,omitempty"`
	// Recurring snapshots and where they are stored.
	BackupConfig *BackupConfig `json:"backup_config,omitempty"`
}

// BackupConfig is the etcd snapshot schedule.
type BackupConfig struct {
	// Take snapshots on a schedule: on the etcd nodes (the `etcd-rolling-snapshots` container, see `snapshot`) and in `rigger serve`, which never both take the same one.
	Enabled *bool `json:"enabled,omitempty"`
	// Hours between two scheduled snapshots, counted from the last successful one.
	IntervalHours int `json:"interval_hours,omitempty"`
	// How many scheduled snapshots are kept (rigger's and, once that many of rigger's are newer, RKE's `<time>_etcd.zip`).
	Retention int `json:"retention,omitempty"`
	// Upload every snapshot to S3 as well.
	S3BackupConfig *S3BackupConfig `json:"s3backupconfig,omitempty"`
	// Write the time in the names of the snapshots rigger names without ':' (`2026-11-22T01-30-00Z_etcd` for `2026-11-22T01:30:00Z_etcd`), as Rancher names them when it drives RKE; RKE's own CLI reads this key and ignores it. Snapshots named either way are listed and retained alike.
	SafeTimestamp bool `json:"safe_timestamp,omitempty"`
	// Seconds a snapshot may take before it is abandoned.
	Timeout int `json:"timeout,omitempty"`
}

// S3BackupConfig is where snapshots are uploaded.
type S3BackupConfig struct {
	// S3 access key (leave empty to use the node's IAM role).
	AccessKey string `json:"access_key,omitempty" rigger:"secret"`
	// S3 secret key.
	SecretKey string `json:"secret_key,omitempty" rigger:"secret"`
	// Bucket name.
	BucketName string `json:"bucket_name,omitempty"`
	// Bucket region.
	Region string `json:"region,omitempty"`
	// S3 endpoint, `host[:port]` (e.g. `s3.amazonaws.com`).
	Endpoint string `json:"endpoint,omitempty"`
	// CA certificate of the endpoint (PEM), for endpoints with a private CA.
	CustomCA string `json:"custom_ca,omitempty"`
	// Folder in the bucket.
	Folder string `json:"folder,omitempty"`
}

// KubeAPIService is kube-apiserver's settings.
type KubeAPIService struct {
	BaseService `json:",inline"`
	// Virtual IP range of Services. Must equal kube-controller's.
	ServiceClusterIPRange string `json:"service_cluster_ip_range,omitempty"`
	// Port range of NodePort Services.
	ServiceNodePortRange string `json:"service_node_port_range,omitempty"`
	// Default level of Pod Security Admission: `privileged`, `baseline` or `restricted`.
	PodSecurityConfiguration string `json:"pod_security_configuration,omitempty"`
	// Enable the AlwaysPullImages admission plugin.
	AlwaysPullImages bool `json:"always_pull_images,omitempty"`
	// Encryption of Secrets at rest.
	SecretsEncryptionConfig *SecretsEncryptionConfig `json:"secrets_encryption_config,omitempty"`
	// API audit log.
	AuditLog *AuditLog `json:"audit_log,omitempty"`
	// An apiserver.config.k8s.io AdmissionConfiguration object, written to a file and given to `--admission-control-config-file`.
	AdmissionConfiguration Object `json:"admission_configuration,omitempty"`
	// The EventRateLimit admission plugin.
	EventRateLimit *EventRateLimit `json:"event_rate_limit,omitempty"`
}

// SecretsEncryptionConfig is encryption of Secrets at rest.
type SecretsEncryptionConfig struct {
	// Encrypt Secrets at rest. Without `custom_config`, rigger generates the key (AES-CBC, 32 bytes, as RKE), keeps it in its state directory (recovered from a controlplane node when lost) and writes it to every controlplane node; Secrets written before are rewritten encrypted. Turning it off again is refused (see docs/secrets-encryption.md).
	Enabled bool `json:"enabled,omitempty"`
	// An apiserver.config.k8s.io EncryptionConfiguration object to use instead of rigger's. At most 10,000 values, as every free-form field.
	CustomConfig Object `json:"custom_config,omitempty" rigger:"secret"`
}

// AuditLog is the API audit log.
type AuditLog struct {
	// Write an audit log.
	Enabled bool `json:"enabled,omitempty"`
	// Where and how the log is written.
	Configuration *AuditLogConfig `json:"configuration,omitempty"`
}

// AuditLogConfig says where and how the audit log is written.
type AuditLogConfig struct {
	// Days a log file is kept.
	MaxAge int `json:"max_age,omitempty"`
	// Number of old log files kept.
	MaxBackup int `json:"max_backup,omitempty"`
	// Megabytes after which the log file is rotated.
	MaxSize int `json:"max_size,omitempty"`
	// Path of the log file on controlplane nodes.
	Path string `json:"path,omitempty"`
	// `json` or `legacy`.
	Format string `json:"format,omitempty"`
	// An audit.k8s.io Policy object. Default: log metadata of every request.
	Policy Object `json:"policy,omitempty"`
}

// EventRateLimit is the EventRateLimit admission plugin.
type EventRateLimit struct {
	// Enable the plugin.
	Enabled bool `json:"enabled,omitempty"`
	// An eventratelimit.admission.k8s.io Configuration object.
	Configuration Object `json:"configuration,omitempty"`
}

// KubeControllerService is kube-controller-manager's settings.
type KubeControllerService struct {
	BaseService `json:",inline"`
	// Pod IP range of the cluster.
	ClusterCIDR string `json:"cluster_cidr,omitempty"`
	// Virtual IP range of Services. Must equal kube-api's.
	ServiceClusterIPRange string `json:"service_cluster_ip_range,omitempty"`
}

// KubeletService is the kubelet's settings.
type KubeletService struct {
	BaseService `json:",inline"`
	// DNS domain of the cluster.
	ClusterDomain string `json:"cluster_domain,omitempty"`
	// Pause image of pods. Default: `system_images.pod_infra_container`.
	// Passed as the kubelet's --pod-infra-container-image, which Kubernetes
	// 1.35 removed: from 1.35 on it is not passed, and cri-dockerd uses its
	// own default pause image (docs/versions.md).
	InfraContainerImage string `json:"infra_container_image,omitempty"`
	// IP of the cluster DNS Service; inside `service_cluster_ip_range`.
	ClusterDNSServer string `json:"cluster_dns_server,omitempty"`
	// Refuse to start when swap is on.
	FailSwapOn bool `json:"fail_swap_on,omitempty"`
	// Issue each kubelet a serving certificate signed by the cluster CA.
	GenerateServingCertificate bool `json:"generate_serving_certificate,omitempty"`
}

// Network is the CNI plugin.
type Network struct {
	// `canal`, `flannel`, `calico`, `weave`, `aci` or `none`. rigger deploys each as RKE does but `aci` (refused by `validate`: deploy the Cisco ACI CNI yourself with `none`).
	Plugin string `json:"plugin,omitempty"`
	// Plugin options, `key: value`.
	Options map[string]string `json:"options,omitempty"`
	// MTU of the pod network (0: the plugin's default).
	MTU int `json:"mtu,omitempty"`
	// Calico options.
	CalicoNetworkProvider *CalicoNetworkProvider `json:"calico_network_provider,omitempty"`
	// Canal options.
	CanalNetworkProvider *CanalNetworkProvider `json:"canal_network_provider,omitempty"`
	// Flannel options.
	FlannelNetworkProvider *FlannelNetworkProvider `json:"flannel_network_provider,omitempty"`
	// Weave options.
	WeaveNetworkProvider *WeaveNetworkProvider `json:"weave_network_provider,omitempty"`
	// Cisco ACI options.
	AciNetworkProvider *AciNetworkProvider `json:"aci_network_provider,omitempty"`
	// Nodes the plugin's pods run on, `label: value`.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// How the plugin's DaemonSet is updated.
	UpdateStrategy *DaemonSetUpdateStrategy `json:"update_strategy,omitempty"`
	// Tolerations of the plugin's pods.
	Tolerations []Toleration `json:"tolerations,omitempty"`
	// Load br_netfilter on the nodes.
	EnableBrNetfilter *bool `json:"enable_br_netfilter,omitempty"`
}

// CalicoNetworkProvider is Calico's options.
type CalicoNetworkProvider struct {
	// Cloud provider Calico runs on (`aws`, or empty).
	CloudProvider string `json:"cloudprovider,omitempty" alias:"cloud_provider"`
}

// FlannelNetworkProvider is flannel's options.
type FlannelNetworkProvider struct {
	// Interface flannel uses for traffic between nodes.
	Iface string `json:"iface,omitempty"`
}

// CanalNetworkProvider is Canal's options.
type CanalNetworkProvider struct {
	// Interface flannel uses for traffic between nodes.
	Iface string `json:"iface,omitempty"`
	// `"true"`: flannel adds a blackhole route for the node's pod range (`--ip-blackhole-route=true`), as RKE v1.8.14 does, when `canal_flannel` is flannel v0.28.1 or later (or a tag that is no version); otherwise it is left off with a warning. The `canal_blackhole_route` key of `network.options` wins over it.
	BlackholeRoute string `json:"blackhole_route,omitempty"`
}

// CanalBlackholeRoute reports whether canal's blackhole route is asked for,
// as RKE v1.8.14 reads it: `network.options.canal_blackhole_route`, or
// `canal_network_provider.blackhole_route` when that option is absent, is
// exactly `true`.
func (n *Network) CanalBlackholeRoute() bool {
	v, ok := n.Options["canal_blackhole_route"]
	if !ok && n.CanalNetworkProvider != nil {
		v = n.CanalNetworkProvider.BlackholeRoute
	}
	return v == "true"
}

// WeaveNetworkProvider is Weave's options.
type WeaveNetworkProvider struct {
	// Password that encrypts Weave's traffic.
	Password string `json:"password,omitempty" rigger:"secret"`
}

// DaemonSetUpdateStrategy is how a DaemonSet add-on is updated. Its keys
// are read in any case (`rollingupdate`, `RollingUpdate`), as RKE reads
// them.
type DaemonSetUpdateStrategy struct {
	// `RollingUpdate` or `OnDelete`.
	Strategy string `json:"strategy,omitempty" match:"fold"`
	// Rolling update parameters.
	RollingUpdate *RollingUpdate `json:"rollingUpdate,omitempty" match:"fold"`
}

// DeploymentStrategy is how a Deployment add-on is updated. Its keys are
// read in any case, as RKE reads them.
type DeploymentStrategy struct {
	// `RollingUpdate` or `Recreate`.
	Strategy string `json:"strategy,omitempty" match:"fold"`
	// Rolling update parameters.
	RollingUpdate *RollingUpdate `json:"rollingUpdate,omitempty" match:"fold"`
}

// RollingUpdate holds rolling update parameters, as in Kubernetes. Its
// keys are read in any case, as RKE reads them.
type RollingUpdate struct {
	// Pods that may be unavailable during the update: a number or a percentage.
	MaxUnavailable string `json:"maxUnavailable,omitempty" match:"fold"`
	// Pods that may be created above the desired number: a number or a percentage.
	MaxSurge string `json:"maxSurge,omitempty" match:"fold"`
}

// Toleration is a Kubernetes toleration.
type Toleration struct {
	// Taint key the toleration matches (empty: every key).
	Key string `json:"key,omitempty"`
	// `Exists` or `Equal`.
	Operator string `json:"operator,omitempty"`
	// Taint value the toleration matches.
	Value string `json:"value,omitempty"`
	// Taint effect the toleration matches (empty: every effect).
	Effect string `json:"effect,omitempty"`
	// Seconds a NoExecute taint is tolerated.
	TolerationSeconds *int64 `json:"tolerationseconds,omitempty" alias:"tolerationSeconds"`
}

// Authentication is how clients authenticate to the API server.
type Authentication struct {
	// `x509`, optionally with `webhook` (`x509|webhook`).
	Strategy string `json:"strategy,omitempty"`
	// More names and IPs for the API server's certificate (for a load balancer in front of it).
	SANs []string `json:"sans,omitempty"`
	// Webhook token authentication.
	Webhook *AuthWebhook `json:"webhook,omitempty"`
}

// AuthWebhook is webhook token authentication.
type AuthWebhook struct {
	// kubeconfig-format file of the webhook, inline.
	ConfigFile string `json:"config_file,omitempty" rigger:"secret"`
	// How long decisions are cached.
	CacheTimeout string `json:"cache_timeout,omitempty"`
}

// Authorization is how the API server authorizes requests.
type Authorization struct {
	// `rbac` or `none`.
	Mode string `json:"mode,omitempty"`
	// Read and ignored, as RKE v1.8.14 ignores it (it passes these options nowhere); rigger warns when one is set. The API server's authorization flags go in `services.kube-api.extra_args`.
	Options map[string]string `json:"options,omitempty"`
}

// Ingress is the ingress controller add-on.
type Ingress struct {
	// `nginx` or `none`.
	Provider string `json:"provider,omitempty"`
	// Options of the controller's ConfigMap.
	Options map[string]string `json:"options,omitempty"`
	// Nodes the controller runs on, `label: value`.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Extra flags of the controller.
	ExtraArgs map[string]string `json:"extra_args,omitempty"`
	// `ClusterFirst`, `ClusterFirstWithHostNet`, `Default` or `None`.
	DNSPolicy string `json:"dns_policy,omitempty"`
	// Extra environment variables of the controller (Kubernetes EnvVar objects).
	ExtraEnvs []Object `json:"extra_envs,omitempty"`
	// Extra volumes of the controller (Kubernetes Volume objects).
	ExtraVolumes []Object `json:"extra_volumes,omitempty"`
	// Extra volume mounts of the controller (Kubernetes VolumeMount objects).
	ExtraVolumeMounts []Object `json:"extra_volume_mounts,omitempty"`
	// How the controller's DaemonSet is updated.
	UpdateStrategy *DaemonSetUpdateStrategy `json:"update_strategy,omitempty"`
	// HTTP port of the controller.
	HTTPPort int `json:"http_port,omitempty"`
	// HTTPS port of the controller.
	HTTPSPort int `json:"https_port,omitempty"`
	// `hostNetwork`, `hostPort` or `none`.
	NetworkMode string `json:"network_mode,omitempty"`
	// Tolerations of the controller's pods.
	Tolerations []Toleration `json:"tolerations,omitempty"`
	// Deploy ingress-nginx's default HTTP backend (the Deployment and Service `default-http-backend`); RKE deploys it by default before Kubernetes 1.21 only.
	DefaultBackend *bool `json:"default_backend,omitempty"`
	// Priority class of the default backend.
	DefaultHTTPBackendPriorityClassName string `json:"default_http_backend_priority_class_name,omitempty"`
	// Priority class of the controller.
	NginxIngressControllerPriorityClassName string `json:"nginx_ingress_controller_priority_class_name,omitempty"`
	// Make this the cluster's default IngressClass.
	DefaultIngressClass *bool `json:"default_ingress_class,omitempty"`
}

// DNS is the cluster DNS add-on.
type DNS struct {
	// `coredns`, `kube-dns` or `none`.
	Provider string `json:"provider,omitempty"`
	// Options of the provider.
	Options map[string]string `json:"options,omitempty"`
	// Resolvers for names outside the cluster.
	UpstreamNameservers []string `json:"upstreamnameservers,omitempty"`
	// Reverse lookup zones answered by the cluster DNS.
	ReverseCIDRs []string `json:"reversecidrs,omitempty"`
	// Resolvers per domain, `domain: [ip, ...]`. kube-dns only: RKE's CoreDNS manifest has no stub domains and ignores them, and so does rigger.
	StubDomains map[string][]string `json:"stubdomains,omitempty"`
	// Nodes the DNS pods run on, `label: value`.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// NodeLocal DNSCache.
	Nodelocal *Nodelocal `json:"nodelocal,omitempty"`
	// How the DNS Deployment is updated.
	UpdateStrategy *DeploymentStrategy `json:"update_strategy,omitempty"`
	// Parameters of the cluster-proportional-autoscaler that sets the number of DNS replicas (its linear mode). When absent, RKE's: 128 cores and 4 nodes per replica, at least 1, and at least 2 on more than one node.
	LinearAutoscalerParams *LinearAutoscalerParams `json:"linear_autoscaler_params,omitempty"`
	// Tolerations of the DNS pods.
	Tolerations []Toleration `json:"tolerations,omitempty"`
}

// Nodelocal is NodeLocal DNSCache.
type Nodelocal struct {
	// Link-local IP the cache listens on, e.g. `169.254.20.10`.
	IPAddress string `json:"ip_address,omitempty"`
	// How the cache's DaemonSet is updated.
	UpdateStrategy *DaemonSetUpdateStrategy `json:"update_strategy,omitempty"`
	// Nodes the cache runs on, `label: value`.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Priority class of the cache.
	NodeLocalDNSPriorityClassName string `json:"node_local_dns_priority_class_name,omitempty"`
}

// LinearAutoscalerParams are the cluster-proportional-autoscaler's parameters.
type LinearAutoscalerParams struct {
	// One replica per this many cores.
	CoresPerReplica float64 `json:"cores_per_replica,omitempty"`
	// One replica per this many nodes.
	NodesPerReplica float64 `json:"nodes_per_replica,omitempty"`
	// Fewest replicas.
	Min int `json:"min,omitempty"`
	// Most replicas.
	Max int `json:"max,omitempty"`
	// At least two replicas when there is more than one node.
	PreventSinglePointFailure bool `json:"prevent_single_point_failure,omitempty"`
}

// Monitoring is the metrics add-on.
type Monitoring struct {
	// `metrics-server` or `none`.
	Provider string `json:"provider,omitempty"`
	// Extra flags of metrics-server.
	Options map[string]string `json:"options,omitempty"`
	// Nodes metrics-server runs on, `label: value`.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// How the Deployment is updated.
	UpdateStrategy *DeploymentStrategy `json:"update_strategy,omitempty"`
	// Number of replicas.
	Replicas *int32 `json:"replicas,omitempty"`
	// Tolerations of the pods.
	Tolerations []Toleration `json:"tolerations,omitempty"`
	// Priority class of metrics-server.
	MetricsServerPriorityClassName string `json:"metrics_server_priority_class_name,omitempty"`
}

// CloudProvider is the cloud provider integration.
type CloudProvider struct {
	// `aws`, `azure`, `openstack`, `vsphere`, `harvester`, `external`, or a name for `customCloudProvider`.
	Name string `json:"name,omitempty"`
	// Use the instance metadata hostname as the node name (AWS).
	UseInstanceMetadataHostname *bool `json:"useInstanceMetadataHostname,omitempty"`
	// AWS cloud config. Refused: rigger does not write it (give the file in `customCloudProvider`); Kubernetes 1.27 and later have no in-tree AWS provider.
	AWSCloudProvider *AWSCloudProvider `json:"awsCloudProvider,omitempty"`
	// Azure cloud config, written to `/etc/kubernetes/cloud-config` on every node as RKE v1.8.14 writes it (JSON with RKE's keys). The in-tree provider is gone from Kubernetes 1.30: `validate` refuses `name: azure` there (use `external` and Azure's cloud controller manager).
	AzureCloudProvider *AzureCloudProvider `json:"azureCloudProvider,omitempty"`
	// OpenStack cloud config, written to `/etc/kubernetes/cloud-config` on every node as RKE v1.8.14 writes it (INI). The in-tree provider is gone from Kubernetes 1.26: `validate` refuses `name: openstack` there (use `external` and OpenStack's cloud controller manager).
	OpenstackCloudProvider *OpenstackCloudProvider `json:"openstackCloudProvider,omitempty"`
	// vSphere cloud config, written to `/etc/kubernetes/cloud-config` on every node as RKE v1.8.14 writes it (INI). The in-tree provider is gone from Kubernetes 1.30: `validate` refuses `name: vsphere` there (use `external` and vSphere's cloud controller manager).
	VsphereCloudProvider *VsphereCloudProvider `json:"vsphereCloudProvider,omitempty"`
	// Harvester cloud config. Refused: rigger does not write it (give the file in `customCloudProvider`).
	HarvesterCloudProvider *HarvesterCloudProvider `json:"harvesterCloudProvider,omitempty"`
	// A cloud config file, inline, for any provider: written to `/etc/kubernetes/cloud-config` as it is, and preferred over the typed blocks, as in RKE.
	CustomCloudProvider string `json:"customCloudProvider,omitempty" rigger:"secret"`
}

// UpgradeStrategy is how nodes are changed.
type UpgradeStrategy struct {
	// Workers changed at once: a number (`2`) or a percentage of the workers (`20%`), at least 1.
	MaxUnavailableWorker string `json:"max_unavailable_worker,omitempty"`
	// Controlplane nodes changed at once: a number or a percentage, at least 1.
	MaxUnavailableControlplane string `json:"max_unavailable_controlplane,omitempty"`
	// Drain a node before its kubelet is changed.
	Drain *bool `json:"drain,omitempty"`
	// How nodes are drained.
	DrainInput *NodeDrainInput `json:"node_drain_input,omitempty"`
}

// NodeDrainInput is how a node is drained.
type NodeDrainInput struct {
	// Delete pods that no controller manages.
	Force bool `json:"force,omitempty"`
	// Go on when DaemonSet pods are on the node (they are left running). RKE reads `false` only when `timeout` and `grace_period` are given too (its parser drops it otherwise); rigger reads it always, and warns then.
	IgnoreDaemonSets *bool `json:"ignore_daemonsets,omitempty"`
	// Delete pods that use emptyDir volumes.
	DeleteLocalData bool `json:"delete_local_data,omitempty"`
	// Seconds each pod has to end (-1: the pod's own grace period).
	GracePeriod int `json:"grace_period,omitempty"`
	// Seconds a drain may take, from 1 to 10800.
	Timeout int `json:"timeout,omitempty"`
}

// Restore restores etcd from a snapshot.
type Restore struct {
	// Restore on the next reconcile.
	Restore bool `json:"restore,omitempty"`
	// Name of the snapshot to restore.
	SnapshotName string `json:"snapshot_name,omitempty"`
	// Request id: each id is restored once; defaults to snapshot_name. Change it to restore the same snapshot again.
	ID string `json:"id,omitempty"`
}

// RotateCertificates asks for a certificate rotation, once.
type RotateCertificates struct {
	// Rotate the CAs too: a new kube-ca and request-header CA, every certificate reissued under them, `services` ignored; the service-account token key is kept, so existing service-account tokens stay valid.
	CACertificates bool `json:"cacertificates,omitempty" alias:"caCertificates"`
	// Components whose certificates are rotated: `etcd`, `kubelet`, `kube-apiserver`, `kube-proxy`, `kube-scheduler`, `kube-controller-manager` (empty: all).
	Services []string `json:"services,omitempty"`
}

// Rigger holds rigger's own settings; RKE has no such block.
type Rigger struct {
	// How SSH connections are checked and kept.
	SSH SSHOptions `json:"ssh,omitempty"`
	// Nodes rigger connects to and observes at once, and brings up at once where nothing runs yet.
	MaxParallel int `json:"max_parallel,omitempty"`
	// Most nodes one reconcile may remove, a number or a percentage of the nodes rigger knows: a guard against a truncated cluster.yml. Removing more needs `rigger apply --allow-removals`.
	MaxRemovedNodes string `json:"max_removed_nodes,omitempty"`
	// What to do with Kubernetes Nodes that no node of cluster.yml owns: `report` or `delete` (cordon, drain, delete).
	StaleNodes string `json:"stale_nodes,omitempty"`
	// `rigger serve` observes and reports the cluster but changes nothing (no apply, no drift repair, no restore; scheduled snapshots go on). `rigger apply` by hand still applies.
	Suspend bool `json:"suspend,omitempty"`
	// How rigger applies add-ons (the network plugin, DNS, metrics-server, ingress, `addons` and `addons_include`).
	Addons RiggerAddons `json:"addons,omitempty"`
	// rigger's own image (`make image` builds it; `rigger/rigger:<version>`), for the `etcd-rolling-snapshots` container of every etcd node (`services.etcd.snapshot`). Empty: `system_images.cert_downloader` when that is rigger's (its repository is named `rigger`; a mirror of rke-tools at any path is not), else the container runs the running rigger's own binary in `system_images.alpine`. Set it to pin what the nodes run whichever rigger applies the cluster, or where the nodes' architecture is not the one rigger was built for.
	Image string `json:"image,omitempty"`
}

// RiggerAddons says how rigger applies add-ons.
type RiggerAddons struct {
	// Delete from the cluster the objects that were removed from an add-on since rigger last applied it, found through the add-on's inventory (a ConfigMap in kube-system); only objects that still carry the add-on's label and rigger's field manager are deleted. `false` keeps RKE's behaviour: such objects stay in the cluster.
	Prune *bool `json:"prune,omitempty"`
	// Objects of the system add-ons (and your own) that rigger does not apply, by `kind`, `namespace` (empty for cluster-scoped kinds) and `name`, e.g. `{kind: Deployment, namespace: kube-system, name: coredns-autoscaler}` where its image cannot be had. One applied before is pruned (with `prune`).
	Exclude []AddonObject `json:"exclude,omitempty"`
}

// AddonObject names one object of an add-on.
type AddonObject struct {
	// Kind, such as `Deployment` (any API group).
	Kind string `json:"kind"`
	// Namespace; empty for a cluster-scoped kind.
	Namespace string `json:"namespace,omitempty"`
	// Name of the object.
	Name string `json:"name"`
}

// SSHOptions says how SSH connections are checked and kept.
type SSHOptions struct {
	// `strict`: a node's host key must be in `known_hosts_file`; `accept-new`: trust a node's first key and record it; `off`: no check (warned about on every run).
	HostKeyPolicy string `json:"host_key_policy,omitempty"`
	// known_hosts file host keys are checked against (and recorded to, with `accept-new`). `@cert-authority` lines are honoured.
	KnownHostsFile string `json:"known_hosts_file,omitempty"`
	// Time allowed to open the TCP connection; the SSH handshake after it gets as long, and at least 30s.
	ConnectTimeout Duration `json:"connect_timeout,omitempty"`
	// Interval of SSH keepalives; a connection that misses them is reopened.
	KeepaliveInterval Duration `json:"keepalive_interval,omitempty"`
}
