package spec

import (
	"reflect"
	"strings"
	"time"

	"github.com/rigger/rigger/spec/riggermeta"
)

// RKE's defaults, and rigger's for its own keys.
const (
	DefaultClusterName           = "local"
	DefaultSSHPort               = "22"
	DefaultSSHKeyPath            = "~/.ssh/id_rsa"
	DefaultDockerSocket          = "/var/run/docker.sock"
	DefaultServiceClusterIPRange = "10.43.0.0/16"
	DefaultServiceNodePortRange  = "30000-32767"
	DefaultClusterCIDR           = "10.42.0.0/16"
	DefaultClusterDNSServer      = "10.43.0.10"
	DefaultClusterDomain         = "cluster.local"
	DefaultNetworkPlugin         = "canal"
	DefaultAuthStrategy          = "x509"
	DefaultAuthorizationMode     = "rbac"
	DefaultIngressProvider       = "nginx"
	DefaultDNSProvider           = "coredns"
	DefaultMonitoringProvider    = "metrics-server"
	DefaultMaxUnavailableWorker  = "10%"
	DefaultMaxUnavailableCP      = "1"
	DefaultAddonJobTimeout       = 45
	DefaultEtcdIntervalHours     = 12
	DefaultEtcdRetention         = 6
	DefaultEtcdBackupTimeout     = 300
	DefaultDrainGracePeriod      = -1
	DefaultDrainTimeout          = 120
	DefaultAuditLogPath          = "/var/log/kube-audit/audit-log.json"

	DefaultTransport         = TransportSSH
	DefaultHostKeyPolicy     = HostKeyStrict
	DefaultKnownHostsFile    = "~/.ssh/known_hosts"
	DefaultConnectTimeout    = 10 * time.Second
	DefaultKeepaliveInterval = 15 * time.Second
	DefaultMaxParallel       = 10
	DefaultMaxRemovedNodes   = "30%"
	DefaultStaleNodes        = StaleNodesReport
)

// Values of rigger's enumerated keys.
const (
	TransportSSH   = "ssh"
	TransportAgent = "agent"

	HostKeyStrict    = "strict"
	HostKeyAcceptNew = "accept-new"
	HostKeyOff       = "off"

	StaleNodesReport = "report"
	StaleNodesDelete = "delete"
)

// Roles of a node.
const (
	RoleEtcd         = "etcd"
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// SetDefaults fills every key the user left empty with its default, as RKE
// does, so that the cluster says exactly what will be applied.
func SetDefaults(c *Cluster) {
	def(&c.ClusterName, DefaultClusterName)
	def(&c.SSHKeyPath, DefaultSSHKeyPath)
	def(&c.KubernetesVersion, DefaultKubernetesVersion)
	def(&c.AddonJobTimeout, DefaultAddonJobTimeout)
	// Kubernetes 1.24 removed dockershim: RKE turns cri-dockerd on from there.
	defBool(&c.EnableCRIDockerd, inRange(c.KubernetesVersion, rangeCRIDockerd))

	for i := range c.Nodes {
		n := &c.Nodes[i]
		def(&n.Port, DefaultSSHPort)
		def(&n.InternalAddress, n.Address)
		def(&n.HostnameOverride, strings.ToLower(n.Address))
		def(&n.DockerSocket, DefaultDockerSocket)
		def(&n.Transport, DefaultTransport)
		if n.SSHKey == "" {
			def(&n.SSHKeyPath, c.SSHKeyPath)
		}
		def(&n.SSHCertPath, c.SSHCertPath)
		n.SSHAgentAuth = n.SSHAgentAuth || c.SSHAgentAuth
	}
	if b := c.BastionHost; b != nil && b.Address != "" {
		def(&b.Port, DefaultSSHPort)
		if b.SSHKey == "" {
			def(&b.SSHKeyPath, c.SSHKeyPath)
		}
	}

	setServiceDefaults(&c.Services)
	setImageDefaults(c)

	def(&c.Network.Plugin, DefaultNetworkPlugin)
	defBool(&c.Network.EnableBrNetfilter, true)
	def(&c.Authentication.Strategy, DefaultAuthStrategy)
	if w := c.Authentication.Webhook; w != nil {
		def(&w.CacheTimeout, "5s")
	}
	def(&c.Authorization.Mode, DefaultAuthorizationMode)

	def(&c.Ingress.Provider, DefaultIngressProvider)
	if inRange(c.KubernetesVersion, rangeIngressHostPort) {
		def(&c.Ingress.NetworkMode, "hostPort")
	}
	def(&c.Ingress.NetworkMode, "hostNetwork") // RKE's default before Kubernetes 1.21
	def(&c.Ingress.HTTPPort, 80)
	def(&c.Ingress.HTTPSPort, 443)
	// RKE deploys the default HTTP backend before Kubernetes 1.21 only.
	defBool(&c.Ingress.DefaultBackend, !inRange(c.KubernetesVersion, rangeIngressNoDefaultBackend))
	defBool(&c.Ingress.DefaultIngressClass, true)

	if c.DNS == nil {
		c.DNS = &DNS{}
	}
	def(&c.DNS.Provider, DefaultDNSProvider)
	if c.DNS.LinearAutoscalerParams != nil {
		p := c.DNS.LinearAutoscalerParams
		def(&p.CoresPerReplica, 128)
		def(&p.NodesPerReplica, 4)
		def(&p.Min, 1)
	}
	def(&c.Monitoring.Provider, DefaultMonitoringProvider)
	if c.Monitoring.Replicas == nil {
		one := int32(1)
		c.Monitoring.Replicas = &one
	}

	if c.UpgradeStrategy == nil {
		c.UpgradeStrategy = &UpgradeStrategy{}
	}
	u := c.UpgradeStrategy
	def(&u.MaxUnavailableWorker, DefaultMaxUnavailableWorker)
	def(&u.MaxUnavailableControlplane, DefaultMaxUnavailableCP)
	defBool(&u.Drain, false)
	if u.DrainInput == nil {
		u.DrainInput = &NodeDrainInput{}
	}
	defBool(&u.DrainInput.IgnoreDaemonSets, true)
	def(&u.DrainInput.GracePeriod, DefaultDrainGracePeriod)
	def(&u.DrainInput.Timeout, DefaultDrainTimeout)

	r := &c.Rigger
	def(&r.SSH.HostKeyPolicy, DefaultHostKeyPolicy)
	def(&r.SSH.KnownHostsFile, DefaultKnownHostsFile)
	def(&r.SSH.ConnectTimeout, Duration(DefaultConnectTimeout))
	def(&r.SSH.KeepaliveInterval, Duration(DefaultKeepaliveInterval))
	def(&r.MaxParallel, DefaultMaxParallel)
	def(&r.MaxRemovedNodes, DefaultMaxRemovedNodes)
	def(&r.StaleNodes, DefaultStaleNodes)
	defBool(&r.Addons.Prune, true)
}

// legacySchedule is what RKE v1.8.14 makes of services.etcd's creation and
// retention when backup_config is null or absent: its etcd-rolling-snapshots
// container then takes a snapshot every `creation` (default 12h) and keeps
// those younger than `retention` (default 72h), where with backup_config it
// is given `--retention=<retention × interval_hours>h`. So creation becomes
// interval_hours (whole hours, rounded up, at least 1) and retention the
// number of snapshots that age holds (rounded up, at least 1): 6h and 24h
// are a snapshot every 6 hours, 4 kept. Durations that do not parse are
// left to validation, and the defaults taken.
func legacySchedule(creation, retention string) *BackupConfig {
	b := &BackupConfig{}
	every, err := time.ParseDuration(creation)
	if creation == "" || err != nil || every <= 0 {
		every = DefaultEtcdIntervalHours * time.Hour
	}
	keep, err := time.ParseDuration(retention)
	if retention == "" || err != nil || keep <= 0 {
		keep = DefaultEtcdIntervalHours * DefaultEtcdRetention * time.Hour
	}
	b.IntervalHours = max(1, int((every+time.Hour-1)/time.Hour))
	interval := time.Duration(b.IntervalHours) * time.Hour
	b.Retention = max(1, int((keep+interval-1)/interval))
	return b
}

func setServiceDefaults(s *Services) {
	e := &s.Etcd
	if len(e.ExternalURLs) == 0 {
		// RKE's etcd tuning for nodes on ordinary networks and disks.
		defArg(&e.BaseService, "election-timeout", "5000")
		defArg(&e.BaseService, "heartbeat-interval", "500")
	}
	if e.BackupConfig == nil {
		e.BackupConfig = legacySchedule(e.Creation, e.Retention)
	}
	b := e.BackupConfig
	defBool(&b.Enabled, true)
	def(&b.IntervalHours, DefaultEtcdIntervalHours)
	def(&b.Retention, DefaultEtcdRetention)
	def(&b.Timeout, DefaultEtcdBackupTimeout)

	api := &s.KubeAPI
	def(&api.ServiceClusterIPRange, DefaultServiceClusterIPRange)
	def(&api.ServiceNodePortRange, DefaultServiceNodePortRange)
	if api.AuditLog == nil {
		api.AuditLog = &AuditLog{Enabled: true}
	}
	if api.AuditLog.Enabled {
		if api.AuditLog.Configuration == nil {
			api.AuditLog.Configuration = &AuditLogConfig{}
		}
		a := api.AuditLog.Configuration
		def(&a.MaxAge, 30)
		def(&a.MaxBackup, 10)
		def(&a.MaxSize, 100)
		def(&a.Path, DefaultAuditLogPath)
		def(&a.Format, "json")
	}

	kc := &s.KubeController
	def(&kc.ClusterCIDR, DefaultClusterCIDR)
	def(&kc.ServiceClusterIPRange, api.ServiceClusterIPRange)

	k := &s.Kubelet
	def(&k.ClusterDomain, DefaultClusterDomain)
	def(&k.ClusterDNSServer, DefaultClusterDNSServer)
}

// setImageDefaults fills system_images from the version table and each
// component's image from system_images. As RKE's setClusterImageDefaults:
// only a kubernetes_version of the table fills them (any other version
// needs them set, which validation checks), a key the user set is kept,
// and the images of the table are prefixed with the URL of the first
// private registry marked is_default. rigger's versions give each
// Kubernetes component an image of its own (riggermeta.Components), used
// while system_images.kubernetes is not set: a set one runs all five, as
// in RKE.
func setImageDefaults(c *Cluster) {
	registry := ""
	for _, r := range c.PrivateRegistries {
		if r.IsDefault {
			registry = r.URL
			break
		}
	}
	if known, ok := KnownImages(c.KubernetesVersion); ok {
		prefixImages(&known, registry)
		fillZero(reflect.ValueOf(&c.SystemImages).Elem(), reflect.ValueOf(known))
	}
	// RKE's setClusterServicesDefaults: "We don't accept per service
	// images anymore": each service's image is system_images', whatever
	// the file says (validation warns when it said something else).
	im := c.SystemImages
	s := &c.Services
	s.Etcd.Image = im.Etcd
	component := func(name string) string { return im.Kubernetes }
	if comps, ok := riggermeta.Components(c.KubernetesVersion); ok && im.Kubernetes == "" {
		component = func(name string) string { return prefixImage(registry, comps[name]) }
	}
	s.KubeAPI.Image = component(riggermeta.KubeAPIServer)
	s.KubeController.Image = component(riggermeta.KubeControllerManager)
	s.Scheduler.Image = component(riggermeta.KubeScheduler)
	s.Kubelet.Image = component(riggermeta.Kubelet)
	s.Kubeproxy.Image = component(riggermeta.KubeProxy)
	def(&s.Kubelet.InfraContainerImage, im.PodInfraContainer)
}

// serviceBases are the services' common settings, by their key under
// services.
func serviceBases(s *Services) map[string]*BaseService {
	return map[string]*BaseService{
		"etcd": &s.Etcd.BaseService, "kube-api": &s.KubeAPI.BaseService, "kube-controller": &s.KubeController.BaseService,
		"scheduler": &s.Scheduler, "kubelet": &s.Kubelet.BaseService, "kubeproxy": &s.Kubeproxy,
	}
}

// serviceImages are the services' image keys as they are now (as the file
// gave them, before SetDefaults), by their key under services.
func serviceImages(s *Services) map[string]string {
	out := map[string]string{}
	for name, b := range serviceBases(s) {
		out[name] = b.Image
	}
	return out
}

// prefixImages puts registry/ before every image of im (RKE's d()).
func prefixImages(im *SystemImages, registry string) {
	v := reflect.ValueOf(im).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		f.SetString(prefixImage(registry, f.String()))
	}
}

// prefixImage puts registry/ before image, when both are given.
func prefixImage(registry, image string) string {
	if registry == "" || image == "" {
		return image
	}
	return registry + "/" + image
}

// fillZero sets every zero field of struct dst to src's.
func fillZero(dst, src reflect.Value) {
	for i := range dst.NumField() {
		if dst.Field(i).IsZero() {
			dst.Field(i).Set(src.Field(i))
		}
	}
}

func defArg(s *BaseService, flag, value string) {
	if _, ok := s.ExtraArgs[flag]; ok {
		return
	}
	if s.ExtraArgs == nil {
		s.ExtraArgs = map[string]string{}
	}
	s.ExtraArgs[flag] = value
}

func def[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

func defBool(p **bool, v bool) {
	if *p == nil {
		*p = &v
	}
}
