package desired

import (
	"cmp"
	"encoding/base64"
	"maps"
	"net"
	"strconv"
	"strings"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/registryauth"
	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/riggermeta"
)

// Settings of RKE's cluster/plan.go that do not depend on cluster.yml. The
// components' other defaults are RKE's service options of the release the
// kubernetes image runs (rkemeta.Options, see release).
const (
	// admissionPluginsFlag is the flag of RKE's service options that the
	// cluster's admission plugins are appended to.
	admissionPluginsFlag = "enable-admission-plugins"
	// controlplaneTaint keeps workloads off controlplane nodes without the worker role.
	controlplaneTaint = "node-role.kubernetes.io/controlplane=true:NoSchedule"
	// rbacMode is the authorization.mode that turns on Node,RBAC.
	rbacMode = "rbac"
	// podInfraFlag is the kubelet's flag for the pause image, until 1.35.
	podInfraFlag = "pod-infra-container-image"
	// CRIDockerdStreamPort is the port of cri-dockerd's streaming server
	// when cri_dockerd_stream_server_port is not set: rke-tools'
	// entrypoint's default.
	CRIDockerdStreamPort = "10010"
	// envCRIDockerd tells RKE's kubelet entrypoint to start cri-dockerd.
	envCRIDockerd = "RKE_KUBELET_CRIDOCKERD=true"
	// EnvKubeletDockerConfig and EnvKubeletDockerFile are RKE's: with
	// private registries, rke-tools' kubelet entrypoint writes the first
	// (base64 of a Docker config.json with the registries' credentials) to
	// the second, the kubelet's root directory, where the kubelet reads
	// the credentials of its pulls of pod images.
	EnvKubeletDockerConfig = "RKE_KUBELET_DOCKER_CONFIG"
	EnvKubeletDockerFile   = "RKE_KUBELET_DOCKER_FILE"
	// envCPHosts is RKE's nginx-proxy variable: the controlplane addresses.
	envCPHosts = "CP_HOSTS"
	// apiServerWatchGrace is the API server's
	// --shutdown-watch-termination-grace-period: within the 30 s a
	// container gets to stop (dockerop.StopTimeout), with room to exit.
	apiServerWatchGrace = "25s"
	// WatchGraceFlag is the API server's flag of that grace (without its
	// dashes): without it, or at 0, an API server holds its watches open
	// when it stops, until it is killed.
	WatchGraceFlag = "shutdown-watch-termination-grace-period"
)

// host is a node of cluster.yml with its roles resolved.
type host struct {
	address, internal, hostname string
	etcd, control, worker       bool
}

func (h *host) roles() []string {
	var r []string
	if h.etcd {
		r = append(r, spec.RoleEtcd)
	}
	if h.control {
		r = append(r, spec.RoleControlPlane)
	}
	if h.worker {
		r = append(r, spec.RoleWorker)
	}
	return r
}

// builder holds what every node's containers are built from.
type builder struct {
	c      *spec.Cluster
	rel    release
	prefix string
	hosts  []host
	etcd   []*host // etcd nodes, in cluster.yml order; none with external etcd
	cp     []*host // controlplane nodes, in cluster.yml order
	peers  []Peer
}

func newBuilder(c *spec.Cluster, rel release) *builder {
	b := &builder{c: c, rel: rel, prefix: c.PrefixPath, hosts: make([]host, len(c.Nodes))}
	for i, n := range c.Nodes {
		h := &b.hosts[i]
		h.address, h.internal, h.hostname = n.Address, n.InternalAddress, n.HostnameOverride
		if h.internal == "" {
			h.internal = h.address
		}
		if h.hostname == "" {
			h.hostname = strings.ToLower(h.address)
		}
		for _, r := range n.Role {
			switch r {
			case spec.RoleEtcd:
				h.etcd = true
			case spec.RoleControlPlane:
				h.control = true
			case spec.RoleWorker:
				h.worker = true
			}
		}
		if h.etcd && !b.externalEtcd() {
			b.etcd = append(b.etcd, h)
		}
		if h.control {
			b.cp = append(b.cp, h)
		}
	}
	b.peers = b.etcdPeers()
	return b
}

func (b *builder) externalEtcd() bool { return len(b.c.Services.Etcd.ExternalURLs) > 0 }

// node is RKE's BuildRKEConfigNodePlan, in start order.
func (b *builder) node(h *host) Node {
	var cs []Container
	if h.etcd && !b.externalEtcd() {
		cs = append(cs, b.etcdContainer(h))
	}
	if h.control {
		cs = append(cs, b.kubeAPI(h), b.kubeController(), b.scheduler())
	} else {
		cs = append(cs, b.nginxProxy())
	}
	if b.criDockerd() {
		cs = append(cs, b.sidekick())
	}
	cs = append(cs, b.kubelet(h), b.kubeProxy(h))
	if h.etcd && SnapshotsOnNodes(b.c) {
		cs = append(cs, b.rollingSnapshots())
	}
	for i := range cs {
		c := &cs[i]
		c.Labels = map[string]string{
			LabelCluster:   b.c.ClusterName,
			LabelComponent: c.Name,
			LabelSpecHash:  c.Hash(),
			LabelSpec:      c.SpecJSON(),
		}
	}
	return Node{Address: h.address, InternalAddress: h.internal, Hostname: h.hostname, Roles: h.roles(), Containers: cs}
}

// kubernetesBind is /etc/kubernetes, under prefix_path on the node. RKE
// drops the SELinux `z` option of its own binds from Kubernetes 1.22 on.
func (b *builder) kubernetesBind() string {
	return hostPath(b.prefix, KubernetesDir) + ":" + KubernetesDir
}

// cloudProvider sets the flags of the components that talk to the cloud,
// as RKE's getCloudProviderName (external-aws is passed as external; the
// file is written by the files step). RKE also passes an empty
// --cloud-provider= without a provider; rigger leaves the flag out, which
// the components read the same way.
func (b *builder) cloudProvider(f flags) {
	if name := b.c.CloudProvider.Name; name != "" {
		if name == "external-aws" {
			name = "external"
		}
		f.set("cloud-provider", name)
		f.set("cloud-config", CloudConfigFile)
	}
}

// kubeComponent is a Kubernetes component's container with what they all
// share; f holds its whole command line, extra_args applied. The flags the
// release's Kubernetes removed are left out (validation refuses them in
// extra_args; those rigger would set itself, such as the API server's
// --cloud-provider from 1.33, are dropped here).
//
// RKE's hyperkube has the binaries in binDir, and so have the images of
// every release of RKE's table. Past RKE's table the component is run by
// its name, found on the image's PATH: CKE's ghcr.io/cybozu/kubernetes has
// them in /usr/local/kubernetes/bin, rigger's recipe (deploy/hyperkube) in
// /usr/local/bin. The containers of RKE's releases keep binDir, and so their
// spec hashes.
func (b *builder) kubeComponent(name string, s spec.BaseService, f flags, env, binds []string) Container {
	f.dropRemoved(name, b.rel.minor)
	f.featureGates(name, b.rel.minor)
	entrypoint := binDir + name
	if b.rel.pastRKE() {
		entrypoint = name
	}
	return Container{
		Name:          name,
		Image:         s.Image,
		Entrypoint:    []string{entrypoint},
		Args:          f.render(),
		Env:           uniq(append(env, s.ExtraEnv...)),
		Binds:         uniq(append(binds, s.ExtraBinds...)),
		NetworkMode:   NetworkModeHost,
		RestartPolicy: RestartAlways,
	}
}

// etcdServers is the API server's --etcd-servers: the node's own etcd
// first when it has one (RKE's GetEtcdConnString), then the others.
func (b *builder) etcdServers(h *host) string {
	urls := make([]string, 0, len(b.etcd))
	for _, e := range b.etcd {
		u := "https://" + joinHostPort(e.internal, EtcdClientPort)
		if e.internal == h.internal {
			urls = append([]string{u}, urls...)
			continue
		}
		urls = append(urls, u)
	}
	return strings.Join(urls, ",")
}

// kubeAPI is RKE's BuildKubeAPIProcess: the cluster's flags, then RKE's
// service options, then what the cluster adds to them, then extra_args.
func (b *builder) kubeAPI(h *host) Container {
	s := b.c.Services.KubeAPI
	f := flags{}
	for k, v := range map[string]string{
		"admission-control-config-file": AdmissionConfigFile,
		"client-ca-file":                certPath(CertCA),
		"etcd-cafile":                   certPath(CertCA),
		"etcd-certfile":                 certPath(CertNode),
		"etcd-keyfile":                  keyPath(CertNode),
		"etcd-prefix":                   EtcdPathPrefix,
		"etcd-servers":                  b.etcdServers(h),
		"kubelet-client-certificate":    certPath(CertAPIServer),
		"kubelet-client-key":            keyPath(CertAPIServer),
		"proxy-client-cert-file":        certPath(CertAPIProxyClient),
		"proxy-client-key-file":         keyPath(CertAPIProxyClient),
		"requestheader-allowed-names":   CertAPIProxyClient,
		"requestheader-client-ca-file":  certPath(CertRequestHeaderCA),
		"service-account-key-file":      keyPath(CertServiceAccountToken),
		"service-cluster-ip-range":      s.ServiceClusterIPRange,
		"service-node-port-range":       s.ServiceNodePortRange,
		"tls-cert-file":                 certPath(CertAPIServer),
		"tls-private-key-file":          keyPath(CertAPIServer),
	} {
		f.set(k, v)
	}
	if e := b.c.Services.Etcd; len(e.ExternalURLs) > 0 {
		f.set("etcd-servers", strings.Join(e.ExternalURLs, ","))
		f.set("etcd-prefix", e.Path)
		f.set("etcd-cafile", certPath(pki.ExternalEtcdCACertName))
		f.set("etcd-certfile", certPath(pki.ExternalEtcdClientCertName))
		f.set("etcd-keyfile", keyPath(pki.ExternalEtcdClientCertName))
	}
	b.cloudProvider(f)
	if w := b.c.Authentication.Webhook; w != nil {
		f.set("authentication-token-webhook-config-file", AuthnWebhookFile)
		f.set("authentication-token-webhook-cache-ttl", w.CacheTimeout)
	}
	if e := s.SecretsEncryptionConfig; e != nil && e.Enabled {
		f.set("encryption-provider-config", EncryptionConfigFile)
	}
	if b.c.Services.Kubelet.GenerateServingCertificate {
		f.set("kubelet-certificate-authority", certPath(CertCA))
	}
	f.options(b.rel.opts.KubeAPI)
	if b.c.Authorization.Mode == rbacMode {
		f.set("authorization-mode", "Node,RBAC")
	}
	if net.ParseIP(h.internal) != nil {
		f.set("advertise-address", h.internal)
	}
	if s.AlwaysPullImages {
		f.appendValue(admissionPluginsFlag, ",AlwaysPullImages")
	}
	if s.EventRateLimit != nil && s.EventRateLimit.Enabled {
		f.appendValue(admissionPluginsFlag, ",EventRateLimit")
	}

	binds := []string{b.kubernetesBind()}
	if a := s.AuditLog; a != nil && a.Enabled && a.Configuration != nil {
		cfg := a.Configuration
		f.set("audit-log-path", cfg.Path)
		f.set("audit-log-maxage", strconv.Itoa(cfg.MaxAge))
		f.set("audit-log-maxbackup", strconv.Itoa(cfg.MaxBackup))
		f.set("audit-log-maxsize", strconv.Itoa(cfg.MaxSize))
		f.set("audit-log-format", cfg.Format)
		f.set("audit-policy-file", AuditPolicyFile)
		binds = append(binds, hostPath(b.prefix, AuditLogDir)+":"+AuditLogDir)
	}
	if b.rel.minor >= 27 { // the flag is there from 1.27 on
		// Beyond RKE: on SIGTERM the API server closes its watches (at
		// least 200 a second) instead of waiting for them until its
		// request timeout, so that a replaced API server stops in seconds,
		// not killed after the 30 s a container gets to stop (what k0s
		// does too). extra_args can set it otherwise.
		f.set(WatchGraceFlag, apiServerWatchGrace)
	}
	f.extra(s.BaseService)
	return b.kubeComponent(KubeAPIServer, s.BaseService, f, nil, binds)
}

// kubeController is RKE's BuildKubeControllerProcess.
func (b *builder) kubeController() Container {
	s := b.c.Services.KubeController
	kubeconfig := configPath(CertControllerManager)
	f := flags{}
	f.set("cluster-cidr", s.ClusterCIDR)
	f.set("kubeconfig", kubeconfig)
	f.set("root-ca-file", certPath(CertCA))
	f.set("service-account-private-key-file", keyPath(CertServiceAccountToken))
	f.set("service-cluster-ip-range", s.ServiceClusterIPRange)
	b.cloudProvider(f)
	f.options(b.rel.opts.KubeController)
	if b.c.Authorization.Mode == rbacMode {
		// RKE passes it after the command, where extra_args cannot
		// override it; rigger lets them.
		f.set("use-service-account-credentials", "true")
	}
	f.set("authentication-kubeconfig", kubeconfig)
	f.set("authorization-kubeconfig", kubeconfig)
	f.extra(s.BaseService)
	return b.kubeComponent(KubeControllerManager, s.BaseService, f, nil, []string{b.kubernetesBind()})
}

// scheduler is RKE's BuildSchedulerProcess.
func (b *builder) scheduler() Container {
	s := b.c.Services.Scheduler
	kubeconfig := configPath(CertScheduler)
	f := flags{}
	f.set("kubeconfig", kubeconfig)
	f.options(b.rel.opts.Scheduler)
	f.set("authentication-kubeconfig", kubeconfig)
	f.set("authorization-kubeconfig", kubeconfig)
	f.extra(s)
	return b.kubeComponent(KubeScheduler, s, f, nil, []string{b.kubernetesBind()})
}

// kubelet is RKE's BuildKubeletProcess.
func (b *builder) kubelet(h *host) Container {
	s := b.c.Services.Kubelet
	kubeletDir := hostPath(b.prefix, KubeletDir)
	f := flags{}
	for k, v := range map[string]string{
		"client-ca-file":    certPath(CertCA),
		"cluster-dns":       s.ClusterDNSServer,
		"cluster-domain":    s.ClusterDomain,
		"fail-swap-on":      strconv.FormatBool(s.FailSwapOn),
		"hostname-override": h.hostname,
		"kubeconfig":        configPath(CertNode),
		podInfraFlag:        s.InfraContainerImage,
		"root-dir":          kubeletDir,
	} {
		f.set(k, v)
	}
	if h.control && !h.worker {
		f.set("register-with-taints", controlplaneTaint)
	}
	// RKE sets --node-ip only when the internal address differs from the
	// address; rigger sets it whenever it is an IP, so that the kubelet of
	// a machine with several interfaces never picks another one.
	if net.ParseIP(h.internal) != nil {
		f.set("node-ip", h.internal)
	}
	b.cloudProvider(f)
	if s.GenerateServingCertificate {
		cert := pki.HostCertName(CertKubelet, h.address, h.internal)
		f.set("tls-cert-file", certPath(cert))
		f.set("tls-private-key-file", keyPath(cert))
	}
	var env, binds []string
	if b.criDockerd() {
		// RKE decides by kubernetes_version; rigger by the release the
		// kubelet runs, which is what has or lacks the flag.
		if b.rel.minor < 27 { // the flag is gone from 1.27 on
			f.set("container-runtime", "remote")
		}
		f.set("container-runtime-endpoint", CRIDockerdSocket)
		binds = append(binds, hostPath(b.prefix, CRIDockerdDir)+":"+CRIDockerdDir)
		env = append(env, envCRIDockerd)
		// As RKE passes them to rke-tools' entrypoint, which hands them to
		// cri-dockerd.
		if a := b.c.CRIDockerdStreamServerAddress; a != "" {
			env = append(env, "CRIDOCKERD_STREAM_SERVER_ADDRESS="+a)
		}
		port := b.c.CRIDockerdStreamServerPort
		if _, gone := riggermeta.Removed(Kubelet, podInfraFlag, b.rel.minor); gone {
			// From 1.35 the kubelet has no --pod-infra-container-image,
			// where rke-tools' entrypoint finds the pause image it gives
			// cri-dockerd. The entrypoint expands the port unquoted
			// into cri-dockerd's command line, after
			// --streaming-bind-addr=<address>:, so the pause image is
			// passed there (docs/versions.md).
			port = cmp.Or(port, CRIDockerdStreamPort) + " --" + podInfraFlag + "=" + s.InfraContainerImage
		}
		if port != "" {
			env = append(env, "CRIDOCKERD_STREAM_SERVER_PORT="+port)
		}
		if strings.Contains(b.c.Services.KubeController.ClusterCIDR, ",") {
			env = append(env, "RKE_KUBELET_CRIDOCKERD_DUALSTACK=true")
		}
	}
	if reg := registryauth.New(b.c.PrivateRegistries); !reg.Empty() {
		env = append(env,
			EnvKubeletDockerConfig+"="+base64.StdEncoding.EncodeToString(reg.KubeletDockerConfig()),
			EnvKubeletDockerFile+"="+hostPath(b.prefix, KubeletDockerConfigFile))
	}
	f.kubeletOptions(b.rel.opts.Kubelet, b.prefix)

	// The label that ties the Node to its machine in cluster.yml, whatever
	// name the Node gets (a cloud provider may rename it). Labels the user
	// gives in extra_args come first; this one is always added.
	base := s.BaseService
	labels := NodeAddressLabel + "=" + NodeAddressLabelValue(h.address)
	if user := base.ExtraArgs["node-labels"]; user != "" {
		labels = user + "," + labels
		base.ExtraArgs = maps.Clone(base.ExtraArgs)
		delete(base.ExtraArgs, "node-labels")
	}
	f.set("node-labels", labels)
	f.extra(base)
	// After extra_args, as in RKE: NodeLocal DNSCache's address wins.
	if dns := b.c.DNS; dns != nil && dns.Nodelocal != nil && dns.Nodelocal.IPAddress != "" {
		f.set("cluster-dns", dns.Nodelocal.IPAddress)
	}

	binds = append(binds,
		b.kubernetesBind(),
		"/etc/cni:/etc/cni:rw",
		"/opt/cni:/opt/cni:rw",
		hostPath(b.prefix, "/var/lib/cni")+":/var/lib/cni",
		"/var/lib/calico:/var/lib/calico",
		"/etc/resolv.conf:/etc/resolv.conf",
		"/sys:/sys:rprivate",
		DockerRootDir+":"+DockerRootDir+":rw,rslave",
		kubeletDir+":"+kubeletDir+":shared",
		"/var/lib/rancher:/var/lib/rancher:shared",
		"/var/run:/var/run:rw,rprivate",
		"/run:/run:rprivate",
		hostPath(b.prefix, "/etc/ceph")+":/etc/ceph",
		"/dev:/host/dev:rprivate",
		"/var/log/containers:/var/log/containers",
		"/var/log/pods:/var/log/pods",
		"/usr:/host/usr:ro",
		"/etc:/host/etc:ro",
	)
	if kubeletDir != KubeletDir {
		// Flex volume drivers install to the usual place.
		binds = append(binds, KubeletDir+"/volumeplugins:"+KubeletDir+"/volumeplugins:shared")
	}
	c := b.kubeComponent(Kubelet, base, f, env, binds)
	c.PidMode = PidModeHost
	c.Privileged = true
	if b.criDockerd() {
		// RKE's kubelet: the entrypoint of rke-tools, from the sidekick's
		// volume, starts cri-dockerd and then the kubelet.
		c.Entrypoint = []string{RKEToolsEntrypoint}
		c.Args = append([]string{Kubelet}, c.Args...)
		c.VolumesFrom = []string{ServiceSidekick}
	}
	return c
}

// criDockerd reports whether the kubelet reaches Docker through cri-dockerd.
func (b *builder) criDockerd() bool {
	return b.c.EnableCRIDockerd != nil && *b.c.EnableCRIDockerd
}

// sidekick is RKE's service-sidekick: a container of the
// kubernetes_services_sidecar image (rancher/rke-tools) that runs once and
// whose volume /opt/rke-tools, with the entrypoint that starts cri-dockerd
// and the cri-dockerd binary, the kubelet mounts.
func (b *builder) sidekick() Container {
	return Container{
		Name:          ServiceSidekick,
		Image:         b.c.SystemImages.KubernetesServicesSidecar,
		Entrypoint:    []string{"/bin/true"},
		NetworkMode:   NetworkModeHost,
		RestartPolicy: RestartNo,
		RunOnce:       true,
	}
}

// kubeProxy is RKE's BuildKubeProxyProcess.
func (b *builder) kubeProxy(h *host) Container {
	s := b.c.Services.Kubeproxy
	f := flags{}
	f.set("cluster-cidr", b.c.Services.KubeController.ClusterCIDR)
	f.set("hostname-override", h.hostname)
	f.set("kubeconfig", configPath(CertKubeProxy))
	f.options(b.rel.opts.Kubeproxy)
	if b.c.CloudProvider.Name != "" {
		// The cloud may rename the Node; bind where the node is reached.
		f.set("bind-address", h.internal)
	}
	f.extra(s)
	binds := []string{b.kubernetesBind(), "/run:/run", "/lib/modules:/lib/modules:ro"}
	c := b.kubeComponent(KubeProxy, s, f, nil, binds)
	c.PidMode = PidModeHost
	c.Privileged = true
	return c
}

// nginxProxy is the local load balancer to every API server on a node
// without the controlplane role. The container is RKE's: the image's own
// entrypoint runs with the command `nginx-proxy` and CP_HOSTS, the
// controlplane nodes' internal addresses in cluster.yml order, and it
// listens on APIServerPort. So the same spec runs rancher/rke-tools (whose
// entrypoint writes an nginx stream configuration) and rigger's own image
// (`rigger nginx-proxy`).
func (b *builder) nginxProxy() Container {
	hosts := make([]string, 0, len(b.cp))
	for _, h := range b.cp {
		hosts = append(hosts, h.internal)
	}
	return Container{
		Name:          NginxProxy,
		Image:         b.c.SystemImages.NginxProxy,
		Args:          []string{"nginx-proxy"},
		Env:           []string{envCPHosts + "=" + strings.Join(hosts, ",")},
		NetworkMode:   NetworkModeHost,
		RestartPolicy: RestartAlways,
	}
}
