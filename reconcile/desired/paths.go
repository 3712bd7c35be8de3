package desired

// Paths inside the containers, as RKE lays them out. Certificates, keys and
// kubeconfigs live under SSLDir on every node (written there by rigger's
// PKI step); their names are RKE's, so that nodes RKE set up keep working.
const (
	// KubernetesDir is bound into every component at the same path.
	KubernetesDir = "/etc/kubernetes"
	// SSLDir holds the certificates, keys and kubeconfigs.
	SSLDir = KubernetesDir + "/ssl/"

	// EtcdDataDir is etcd's data directory inside its container; the
	// node's /var/lib/etcd (under prefix_path) is bound there.
	EtcdDataDir = "/var/lib/rancher/etcd/"
	// EtcdHostDataDir is the node directory holding etcd's data.
	EtcdHostDataDir = "/var/lib/etcd"
	// EtcdPathPrefix is the key prefix of the API server's objects in etcd.
	EtcdPathPrefix = "/registry"

	// AdmissionConfigFile is the API server's admission configuration.
	AdmissionConfigFile = KubernetesDir + "/admission.yaml"
	// AuditPolicyFile is the API server's audit policy.
	AuditPolicyFile = KubernetesDir + "/audit-policy.yaml"
	// AuditLogDir is where the API server writes its audit log (bound from the node).
	AuditLogDir = "/var/log/kube-audit"
	// CloudConfigFile is the cloud provider's configuration, where RKE
	// writes it.
	CloudConfigFile = KubernetesDir + "/cloud-config"
	// AuthnWebhookFile is the webhook token authenticator's kubeconfig.
	AuthnWebhookFile = KubernetesDir + "/kube-api-authn-webhook.yaml"
	// EncryptionConfigFile is the API server's secrets encryption configuration.
	EncryptionConfigFile = SSLDir + "encryption.yaml"

	// KubeletDir is the kubelet's root directory (under prefix_path).
	KubeletDir = "/var/lib/kubelet"
	// KubeletDockerConfigFile is the Docker config file with the private
	// registries' credentials, in the kubelet's root directory (under
	// prefix_path), as RKE has it (EnvKubeletDockerFile).
	KubeletDockerConfigFile = KubeletDir + "/config.json"
	// DockerRootDir is Docker's data root, bound into the kubelet. Docker's
	// default; a node with another data-root is a later input of Build.
	DockerRootDir = "/var/lib/docker"
	// CRIDockerdSocket is the CRI endpoint of cri-dockerd.
	CRIDockerdSocket = "unix:///var/run/cri-dockerd.sock"
	// RKEToolsEntrypoint is rke-tools' entrypoint, in ServiceSidekick's
	// volume: it starts cri-dockerd when RKE_KUBELET_CRIDOCKERD is true.
	RKEToolsEntrypoint = "/opt/rke-tools/entrypoint.sh"
	// CRIDockerdDir is cri-dockerd's state directory (under prefix_path).
	CRIDockerdDir = "/var/lib/cri-dockerd"

	// binDir holds the components' binaries in the Kubernetes and etcd images.
	binDir = "/usr/local/bin/"
)

// Certificate names (RKE's pki package): a certificate is SSLDir+name+".pem",
// its key SSLDir+name+"-key.pem", a kubeconfig SSLDir+"kubecfg-"+name+".yaml".
const (
	CertCA                  = "kube-ca"
	CertAPIServer           = "kube-apiserver"
	CertControllerManager   = "kube-controller-manager"
	CertScheduler           = "kube-scheduler"
	CertKubeProxy           = "kube-proxy"
	CertNode                = "kube-node"
	CertEtcd                = "kube-etcd"
	CertKubelet             = "kube-kubelet"
	CertAPIProxyClient      = "kube-apiserver-proxy-client"
	CertRequestHeaderCA     = "kube-apiserver-requestheader-ca"
	CertServiceAccountToken = "kube-service-account-token"
)

// Ports of the components.
const (
	// APIServerPort is the API server's secure port, and nginx-proxy's.
	APIServerPort = "6443"
	// EtcdClientPort is etcd's client port.
	EtcdClientPort = "2379"
	// EtcdPeerPort is etcd's peer port.
	EtcdPeerPort = "2380"
)

func certPath(name string) string   { return SSLDir + name + ".pem" }
func keyPath(name string) string    { return SSLDir + name + "-key.pem" }
func configPath(name string) string { return SSLDir + "kubecfg-" + name + ".yaml" }

// CleanPaths are the node directories a node is emptied of when it leaves
// the cluster (rigger remove, or a node gone from cluster.yml): rigger's
// files, etcd's data and the audit log, and the network plugin's CNI
// configuration, binaries and state, as RKE's CleanUpAll does, prefix_path
// applied where RKE applies it. A node that joins another cluster later
// must not find the old cluster's network plugin configured.
func CleanPaths(prefix string) []string {
	return []string{
		hostPath(prefix, KubernetesDir),
		hostPath(prefix, EtcdHostDataDir),
		hostPath(prefix, AuditLogDir),
		"/etc/cni",
		"/opt/cni",
		hostPath(prefix, "/var/lib/cni"),
		"/var/run/calico",
	}
}
