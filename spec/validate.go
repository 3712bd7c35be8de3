package spec

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/rigger/rigger/spec/riggermeta"
	"github.com/rigger/rigger/spec/rkemeta"
)

// validator checks a decoded, defaulted cluster as a whole.
type validator struct {
	file string
	pos  map[string]Pos
	bad  map[string]bool // paths that failed to decode: nothing more is said about them
	// holdsBad holds every path with a bad path inside it.
	holdsBad map[string]bool
	zero     map[string]bool // paths given an explicit 0
	diags    *collector
	// givenImages are the services' image keys as the file gave them,
	// before the defaults replaced them (serviceImages).
	givenImages map[string]string
	// noBackupConfig: the file's services.etcd.backup_config was null or
	// absent, so creation and retention make the schedule (legacySchedule).
	noBackupConfig bool
}

// newValidator makes the validator of what d decoded.
func newValidator(d *decoder) *validator {
	v := &validator{file: d.file, pos: d.pos, bad: d.bad, holdsBad: map[string]bool{}, zero: d.zero, diags: d.diags}
	for b := range d.bad {
		for i := 1; i < len(b); i++ {
			if b[i] == '.' || b[i] == '[' {
				v.holdsBad[b[:i]] = true
			}
		}
	}
	return v
}

// at returns the position of path, or of its closest ancestor that has one.
func (v *validator) at(p string) Pos {
	for p != "" {
		if pos, ok := v.pos[p]; ok {
			return pos
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return Pos{}
}

// related reports whether p is, contains or lies inside a path that failed
// to decode. Its work grows with the length of p, not with the number of
// bad paths.
func (v *validator) related(p string) bool {
	if v.bad[p] || v.holdsBad[p] {
		return true
	}
	for i := len(p) - 1; i > 0; i-- {
		if (p[i] == '.' || p[i] == '[') && v.bad[p[:i]] {
			return true
		}
	}
	return false
}

func (v *validator) add(sev Severity, p, detail, format string, args ...any) {
	if v.related(p) {
		return
	}
	pos := v.at(p)
	v.diags.add(Diagnostic{
		Severity: sev, File: v.file, Line: pos.Line, Column: pos.Column,
		Path: p, Summary: sprintf(format, args...), Detail: detail,
	})
}

func (v *validator) errorf(p, detail, format string, args ...any) {
	v.add(SeverityError, p, detail, format, args...)
}

func (v *validator) warnf(p, detail, format string, args ...any) {
	v.add(SeverityWarning, p, detail, format, args...)
}

// oneOf reports value at p unless it is one of allowed (or empty, when empty is allowed).
func (v *validator) oneOf(p, value string, emptyOK bool, allowed ...string) bool {
	if (value == "" && emptyOK) || slices.Contains(allowed, value) {
		return true
	}
	detail := "Allowed: " + strings.Join(allowed, ", ") + "."
	if s := suggest(value, allowed); s != "" {
		detail = fmt.Sprintf("Did you mean %q? ", s) + detail
	}
	v.errorf(p, detail, "%q is not a valid value", value)
	return false
}

// positiveInts are the whole-number keys whose 0 would be read as "unset"
// and replaced by the default, where RKE does not read 0 so: an explicit 0
// there is a mistake. (RKE reads a 0 addon_job_timeout, and backup_config's
// interval_hours, retention and timeout, as unset: `rke config` writes
// addon_job_timeout: 0 in every file. Its drain timeout 0 waits forever.)
var positiveInts = []string{
	"upgrade_strategy.node_drain_input.timeout",
	"rigger.max_parallel",
}

// validate checks c, part after part; between two parts, it stops with
// the cause when ctx ends.
func (v *validator) validate(ctx context.Context, c *Cluster) error {
	for _, p := range positiveInts {
		if v.zero[p] {
			v.errorf(p, "Leave the key out to get the default.", "%s must be at least 1, got 0", p[strings.LastIndex(p, ".")+1:])
		}
	}
	for _, check := range []func(*Cluster){
		v.clusterName, v.version, v.nodes, v.services, v.network, v.auth, v.addons,
		v.upgradeStrategy, v.registries, v.bastion, v.misc, v.rigger, v.notWritten,
		v.kubernetesImage, v.removedFlags, v.retiredIngress,
	} {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		check(c)
	}
	return nil
}

func (v *validator) clusterName(c *Cluster) {
	if errs := labelValueErrors(c.ClusterName); c.ClusterName == "" || len(errs) > 0 {
		v.errorf("cluster_name", "It names containers' labels and kubeconfig contexts: use letters, digits, '-', '_' and '.', at most 63 characters.",
			"cluster_name %q is not valid", c.ClusterName)
	}
}

// version checks kubernetes_version as RKE does (it must be `v` and a
// semantic version, and a version outside the table needs its images set),
// and that rigger can run it: Kubernetes 1.24 or later, with RKE's default
// flags for the version the kubernetes image runs.
func (v *validator) version(c *Cluster) {
	kv, err := rkemeta.ParseVersion(c.KubernetesVersion)
	if err != nil {
		v.errorf("kubernetes_version", "Write it as RKE does, with the leading v: v1.32.3-rancher1-1, or v1.31.4 with system_images set.", "%v", err)
		return
	}
	if kv.Major != 1 || kv.Minor < rkemeta.MinMinor {
		v.errorf("kubernetes_version", fmt.Sprintf("Upgrade the cluster to Kubernetes 1.%d or later with RKE first (the oldest version rigger knows is %s), then move it to rigger.", rkemeta.MinMinor, KubernetesVersions()[0]),
			"%s: rigger runs Kubernetes 1.%d and later", c.KubernetesVersion, rkemeta.MinMinor)
		return
	}
	if _, known := KnownImages(c.KubernetesVersion); !known {
		if missing, first := missingImages(c); len(missing) > 0 {
			v.errorf("kubernetes_version", versionDetail(c.KubernetesVersion, missing),
				"%s is an unsupported Kubernetes version and system images are not populated: %s", c.KubernetesVersion, first)
			return
		}
	}
	// RKE picks the components' default flags by the tag of the
	// kubernetes image first; rigger knows them from 1.24 on.
	if c.SystemImages.Kubernetes == "" {
		return
	}
	if _, series, err := riggermeta.ServiceOptionsFor(c.KubernetesVersion, c.SystemImages.Kubernetes); err != nil {
		p, detail := "kubernetes_version", ""
		if tag := rkemeta.ImageTag(c.SystemImages.Kubernetes); rkemeta.Series(tag) != "" {
			p = "system_images.kubernetes"
			detail = fmt.Sprintf("The tag %s of the image says Kubernetes %s, and RKE takes the components' default flags from the image's tag. ", tag, series)
		}
		if sv, err := rkemeta.ParseVersion(series + ".0"); err == nil && sv.Major == 1 && sv.Minor < rkemeta.MinMinor {
			// RKE has flags back to 1.9; running nothing before 1.24 is
			// rigger's own rule (dockershim is gone from 1.24 on).
			detail += fmt.Sprintf("rigger runs Kubernetes 1.%d and later only: that is rigger's policy, not RKE's. Upgrade the cluster to 1.%d or later with RKE first, then move it to rigger with an image of 1.%d or later.", rkemeta.MinMinor, rkemeta.MinMinor, rkemeta.MinMinor)
			v.errorf(p, detail, "%s: rigger runs Kubernetes 1.%d and later, not %s", c.SystemImages.Kubernetes, rkemeta.MinMinor, series)
			return
		}
		rkeNewest := strings.TrimPrefix(rkemeta.Series(rkemeta.Versions()[len(rkemeta.Versions())-1]), "v")
		newest := strings.TrimPrefix(rkemeta.Series(KubernetesVersions()[len(KubernetesVersions())-1]), "v")
		detail += fmt.Sprintf("RKE %s, RKE's last release, has default flags up to Kubernetes %s, rigger's own table goes on to %s, and rigger runs 1.%d to %s; use an image of one of those.", rkemeta.RKEVersion, rkeNewest, newest, rkemeta.MinMinor, newest)
		v.errorf(p, detail, "%s: no default component flags for Kubernetes %s", c.SystemImages.Kubernetes, series)
	}
}

var roles = []string{RoleEtcd, RoleControlPlane, RoleWorker}

func (v *validator) nodes(c *Cluster) {
	if len(c.Nodes) == 0 {
		v.errorf("nodes", "Add the cluster's machines under nodes:, each with address, user and role.", "no nodes are defined")
		return
	}
	count := map[string]int{}
	addresses := map[string]int{}
	hostnames := map[string]int{}
	for i, n := range c.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		host := i + 1
		if n.Address == "" {
			v.errorf(p+".address", "Give the IP or name rigger reaches the node at.", "Address for host (%d) is not provided", host)
		}
		if n.User == "" && n.Transport == TransportSSH {
			v.errorf(p+".user", "Give the SSH user; it needs access to the Docker socket.", "User for host (%d) is not provided", host)
		}
		if len(n.Role) == 0 {
			v.errorf(p+".role", "Give one or more of: etcd, controlplane, worker.", "Role for host (%d) is not provided", host)
		}
		seen := map[string]bool{}
		for j, r := range n.Role {
			rp := fmt.Sprintf("%s.role[%d]", p, j)
			switch {
			case !slices.Contains(roles, r):
				detail := "Roles are etcd, controlplane and worker."
				if s := suggest(r, roles); s != "" {
					detail = fmt.Sprintf("Did you mean %q? ", s) + detail
				} else if r == "master" || r == "control-plane" {
					detail = `Did you mean "controlplane"? ` + detail
				}
				v.errorf(rp, detail, "Role [%s] for host (%d) is not recognized", r, host)
			case seen[r]:
				v.warnf(rp, "", "role %q is listed twice", r)
			default:
				count[r]++
			}
			seen[r] = true
		}
		if n.HostnameOverride != "" {
			if errs := dns1123SubdomainErrors(n.HostnameOverride); len(errs) > 0 {
				field, detail := p+".hostname_override", ""
				if _, set := v.pos[field]; !set {
					field, detail = p+".address", "The node name defaults to the address; set hostname_override to a valid name."
				}
				v.errorf(field, detail, "Hostname_override [%s] for host (%d) is not valid: %s", n.HostnameOverride, host, strings.Join(errs, "; "))
			}
		}
		if n.Address != "" {
			if j, dup := addresses[n.Address]; dup {
				v.errorf(p+".address", fmt.Sprintf("nodes[%d] has the same address; each machine is listed once.", j), "Cluster can't have duplicate node: %s", n.Address)
			}
			addresses[n.Address] = i
		}
		if n.HostnameOverride != "" {
			if j, dup := hostnames[n.HostnameOverride]; dup && c.Nodes[j].Address != n.Address {
				v.errorf(p+".hostname_override", fmt.Sprintf("nodes[%d] has the same node name; node names must be unique.", j), "Cluster can't have duplicate node: %s", n.HostnameOverride)
			}
			hostnames[n.HostnameOverride] = i
		}
		v.port(p+".port", n.Port)
		v.oneOf(p+".transport", n.Transport, false, TransportSSH, TransportAgent)
		if n.DockerSocket != "" && !validSocketPath(n.DockerSocket) {
			v.errorf(p+".docker_socket", "Give the absolute path of the node's Docker socket, e.g. /var/run/docker.sock: "+
				"letters, digits and / . _ - + @ only (it goes into the agent's docker run line).",
				"docker_socket %q is not an absolute path of a socket", n.DockerSocket)
		}
		if n.SSHKey != "" {
			if _, set := v.pos[p+".ssh_key_path"]; set {
				v.warnf(p+".ssh_key_path", "", "ssh_key and ssh_key_path are both set: ssh_key is used")
			}
		}
		if n.InternalAddress != "" && net.ParseIP(n.InternalAddress) == nil && len(dns1123SubdomainErrors(strings.ToLower(n.InternalAddress))) > 0 {
			v.errorf(p+".internal_address", "Give an IP address or a resolvable name.", "internal_address %q is neither an IP address nor a host name", n.InternalAddress)
		}
		v.labels(p+".labels", n.Labels)
		for j, t := range n.Taints {
			tp := fmt.Sprintf("%s.taints[%d]", p, j)
			if errs := qualifiedNameErrors(t.Key); len(errs) > 0 {
				v.errorf(tp+".key", "Taint keys are label-style names, e.g. dedicated or example.com/gpu.", "taint key %q is not valid: %s", t.Key, strings.Join(errs, "; "))
			}
			if errs := labelValueErrors(t.Value); len(errs) > 0 {
				v.errorf(tp+".value", "", "taint value %q is not valid: %s", t.Value, strings.Join(errs, "; "))
			}
			v.oneOf(tp+".effect", t.Effect, false, "NoSchedule", "PreferNoSchedule", "NoExecute")
		}
	}

	external := len(c.Services.Etcd.ExternalURLs) > 0
	switch {
	case count[RoleEtcd] == 0 && !external:
		v.errorf("nodes", "Give at least one node the etcd role (three for a cluster that survives the loss of one).", "Cluster must have at least one etcd plane host: please specify one or more etcd in cluster config")
	case count[RoleEtcd] > 0 && external:
		v.errorf("services.etcd.external_urls", "Remove the etcd role from the nodes, or remove external_urls.", "Cluster can't have both internal and external etcd")
	case count[RoleEtcd]%2 == 0 && !external:
		v.warnf("nodes", fmt.Sprintf("%d etcd members tolerate no more failures than %d; use an odd number.", count[RoleEtcd], count[RoleEtcd]-1),
			"the cluster has an even number of etcd nodes (%d)", count[RoleEtcd])
	}
	v.etcdCertNames(c)
	if count[RoleControlPlane] == 0 {
		v.errorf("nodes", "Give at least one node the controlplane role.", "Cluster must have at least one control plane host: please specify one or more controlplane in cluster config")
	}
	if count[RoleWorker] == 0 {
		v.warnf("nodes", "Controlplane and etcd nodes are tainted by default; give at least one node the worker role, or remove those taints.", "no node has the worker role")
	}
}

func (v *validator) port(p, port string) {
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.errorf(p, "", "port %q is not a number from 1 to 65535", port)
	}
}

func (v *validator) labels(p string, labels map[string]string) {
	for k, val := range labels {
		lp := mapKeyPath(p, k)
		if errs := qualifiedNameErrors(k); len(errs) > 0 {
			v.errorf(lp, "Label keys are an optional DNS prefix and a name: example.com/tier.", "label key %q is not valid: %s", k, strings.Join(errs, "; "))
		}
		if errs := labelValueErrors(val); len(errs) > 0 {
			v.errorf(lp, "", "label value %q is not valid: %s", val, strings.Join(errs, "; "))
		}
	}
}

func (v *validator) services(c *Cluster) {
	s := &c.Services
	for name, b := range serviceBases(s) {
		v.baseService("services."+name, b)
		if given := v.givenImages[name]; given != "" && given != b.Image {
			key := "system_images.kubernetes"
			if name == "etcd" {
				key = "system_images.etcd"
			}
			v.warnf("services."+name+".image", fmt.Sprintf("RKE does not accept a service's own image: it runs %s (%s) instead, and so does rigger. Set %s, or remove services.%s.image.", key, b.Image, key, name),
				"services.%s.image %s is replaced by %s", name, given, key)
		}
	}

	e := &s.Etcd
	if len(e.ExternalURLs) > 0 {
		for i, u := range e.ExternalURLs {
			if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
				v.errorf(fmt.Sprintf("services.etcd.external_urls[%d]", i), "Write it as https://host:2379.", "external etcd URL %q has no scheme", u)
			}
		}
		for _, f := range []struct{ key, val, msg string }{
			{"ca_cert", e.CACert, "External CA Certificate for etcd can't be empty"},
			{"cert", e.Cert, "External Client Certificate for etcd can't be empty"},
			{"key", e.Key, "External Client Key for etcd can't be empty"},
			{"path", e.Path, "External etcd path can't be empty"},
		} {
			if f.val == "" {
				v.errorf("services.etcd."+f.key, "", "%s", f.msg)
			}
		}
		v.externalEtcdPEM(e)
	}
	for key, val := range map[string]string{"creation": e.Creation, "retention": e.Retention} {
		if val == "" {
			continue
		}
		if d, err := time.ParseDuration(val); err != nil || d <= 0 {
			v.errorf("services.etcd."+key, "Write it as a positive duration, like 12h.", "%q is not a positive duration", val)
			continue
		}
		if !v.noBackupConfig {
			v.warnf("services.etcd."+key, "Remove it: with backup_config set, RKE ignores creation and retention, and so does rigger (backup_config.interval_hours and retention make the schedule).",
				"services.etcd.%s is ignored because backup_config is set", key)
		}
	}
	if v.noBackupConfig && e.Creation != "" {
		if d, err := time.ParseDuration(e.Creation); err == nil && d > 0 && d%time.Hour != 0 {
			v.warnf("services.etcd.creation", fmt.Sprintf("rigger takes scheduled snapshots every whole number of hours: every %d hours here. Write creation in whole hours, or set backup_config.interval_hours.", e.BackupConfig.IntervalHours),
				"creation %s is not a whole number of hours", e.Creation)
		}
	}
	if b := e.BackupConfig; b != nil {
		for key, val := range map[string]int{"interval_hours": b.IntervalHours, "retention": b.Retention, "timeout": b.Timeout} {
			if val < 0 {
				v.errorf("services.etcd.backup_config."+key, "", "%s must be at least 1, got %d", key, val)
			}
		}
		if s3 := b.S3BackupConfig; s3 != nil {
			v.s3(c, s3)
		}
	}

	api := &s.KubeAPI
	apiRanges := v.cidrs("services.kube-api.service_cluster_ip_range", api.ServiceClusterIPRange)
	podRanges := v.cidrs("services.kube-controller.cluster_cidr", s.KubeController.ClusterCIDR)
	v.cidrs("services.kube-controller.service_cluster_ip_range", s.KubeController.ServiceClusterIPRange)
	if api.ServiceClusterIPRange != s.KubeController.ServiceClusterIPRange {
		v.errorf("services.kube-controller.service_cluster_ip_range", "Set the same range in services.kube-api and services.kube-controller (or leave kube-controller's empty to inherit kube-api's).",
			"service_cluster_ip_range of kube-api (%s) and kube-controller (%s) must be the same", api.ServiceClusterIPRange, s.KubeController.ServiceClusterIPRange)
	}
	for _, a := range apiRanges {
		for _, b := range podRanges {
			if a.Contains(b.IP) || b.Contains(a.IP) {
				v.errorf("services.kube-controller.cluster_cidr", "The pod range and the Service range must not overlap.", "cluster_cidr %s overlaps service_cluster_ip_range %s", b, a)
			}
		}
	}
	if ip := net.ParseIP(s.Kubelet.ClusterDNSServer); ip == nil {
		v.errorf("services.kubelet.cluster_dns_server", "", "cluster_dns_server %q is not an IP address", s.Kubelet.ClusterDNSServer)
	} else if len(apiRanges) > 0 && !slices.ContainsFunc(apiRanges, func(n *net.IPNet) bool { return n.Contains(ip) }) {
		v.errorf("services.kubelet.cluster_dns_server", "Pick an address inside the Service range, such as its .10.",
			"cluster_dns_server %s is not inside service_cluster_ip_range %s", ip, api.ServiceClusterIPRange)
	}
	if lo, hi, ok := strings.Cut(api.ServiceNodePortRange, "-"); !ok || !portRange(lo, hi) {
		v.errorf("services.kube-api.service_node_port_range", "Write it as 30000-32767.", "service_node_port_range %q is not a port range", api.ServiceNodePortRange)
	}
	v.oneOf("services.kube-api.pod_security_configuration", api.PodSecurityConfiguration, true, "privileged", "baseline", "restricted")
	v.object("services.kube-api.admission_configuration", api.AdmissionConfiguration)
	if a := api.AuditLog; a != nil && a.Configuration != nil {
		v.oneOf("services.kube-api.audit_log.configuration.format", a.Configuration.Format, true, "json", "legacy")
		v.object("services.kube-api.audit_log.configuration.policy", a.Configuration.Policy)
	}
	if e := api.EventRateLimit; e != nil {
		v.object("services.kube-api.event_rate_limit.configuration", e.Configuration)
	}
	if se := api.SecretsEncryptionConfig; se != nil {
		v.object("services.kube-api.secrets_encryption_config.custom_config", se.CustomConfig)
	}
	if p, ok := api.AdmissionConfiguration["plugins"]; ok && p != nil {
		if _, list := p.([]any); !list {
			v.errorf("services.kube-api.admission_configuration", "Write plugins as a list of {name, configuration}.", "admission_configuration.plugins is not a list")
		}
	}
	// RKE's validatePodSecurity. RKE defaults pod_security_configuration to
	// privileged unless kube-api's extra_args name an admission config file.
	level := api.PodSecurityConfiguration
	if _, own := api.ExtraArgs["admission-control-config-file"]; level == "" && !own {
		level = "privileged"
	}
	if level != "" && c.Authorization.Mode == "none" {
		p := "authorization.mode"
		if api.PodSecurityConfiguration != "" {
			p = "services.kube-api.pod_security_configuration"
		}
		v.errorf(p, "RKE sets the PodSecurity admission plugin up on every cluster from Kubernetes 1.23 on, and it needs RBAC: use authorization.mode rbac, or give your own admission-control-config-file in services.kube-api.extra_args.",
			"PodSecurity can't be enabled with RBAC support disabled")
	}
}

// rbacMode is the authorization.mode that turns RBAC on.
const rbacMode = "rbac"

func portRange(lo, hi string) bool {
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	return err1 == nil && err2 == nil && a >= 1 && a < b && b <= 65535
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (v *validator) baseService(p string, b *BaseService) {
	for k := range b.ExtraArgs {
		if strings.HasPrefix(k, "-") {
			v.warnf(mapKeyPath(p+".extra_args", k), sprintf("Write %q: rigger adds the dashes.", strings.TrimLeft(k, "-")), "flag %q starts with a dash", k)
		}
	}
	for i, bind := range b.ExtraBinds {
		parts := strings.Split(bind, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !path.IsAbs(parts[1]) {
			v.errorf(fmt.Sprintf("%s.extra_binds[%d]", p, i), "Write it as /host/path:/container/path or /host/path:/container/path:ro.", "bind %q is not host-path:container-path[:options]", bind)
		}
	}
	for i, env := range b.ExtraEnv {
		name, _, ok := strings.Cut(env, "=")
		if !ok || !envName.MatchString(name) {
			v.errorf(fmt.Sprintf("%s.extra_env[%d]", p, i), "Write it as NAME=value.", "environment entry %q is not NAME=value", env)
		}
	}
}

// cidrs parses a comma-separated list of CIDRs (dual stack), reporting bad ones.
func (v *validator) cidrs(p, s string) []*net.IPNet {
	var out []*net.IPNet
	for part := range strings.SplitSeq(s, ",") {
		_, n, err := net.ParseCIDR(strings.TrimSpace(part))
		if err != nil {
			v.errorf(p, "Write it as an address range like 10.43.0.0/16.", "%q is not a CIDR", part)
			return nil
		}
		out = append(out, n)
	}
	return out
}

// object checks that a Kubernetes object given inline names its type.
func (v *validator) object(p string, o Object) {
	if o == nil {
		return
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if s, ok := o[k].(string); !ok || s == "" {
			v.errorf(p, "Give the whole Kubernetes object, starting with apiVersion and kind.", "the object has no %s", k)
		}
	}
}

func (v *validator) s3(c *Cluster, s3 *S3BackupConfig) {
	p := "services.etcd.backup_config.s3backupconfig"
	if s3.Endpoint == "" {
		v.errorf(p+".endpoint", "Give the S3 endpoint, e.g. s3.amazonaws.com or minio.example.com:9000.", "etcd s3 backup backend endpoint can't be empty")
	} else if strings.Contains(s3.Endpoint, "://") {
		v.errorf(p+".endpoint", "Give host[:port] only; TLS is always used.", "endpoint %q must not include a scheme", s3.Endpoint)
	}
	if s3.BucketName == "" {
		v.errorf(p+".bucket_name", "", "etcd s3 backup backend bucketName can't be empty")
	}
	if (s3.AccessKey == "") != (s3.SecretKey == "") {
		v.errorf(p, "Give both access_key and secret_key, or neither (to use the node's IAM role).", "only one of access_key and secret_key is set")
	}
	if s3.CustomCA != "" {
		if err := checkCertPEM(s3.CustomCA); err != nil {
			v.errorf(p+".custom_ca", "Give the PEM certificate of the CA that signed the endpoint's certificate.", "invalid S3 endpoint CA certificate: %v", err)
		}
	}
	if b := c.Services.Etcd.BackupConfig; b.Enabled != nil && !*b.Enabled {
		v.warnf(p, "Only snapshots taken with `rigger snapshot save` are uploaded.", "s3backupconfig is set but backup_config.enabled is false")
	}
}

// externalEtcdPEM checks that the external etcd's ca_cert and cert are
// PEM certificates and key is cert's private key: the API server cannot
// start otherwise, and says so only in its container's log.
func (v *validator) externalEtcdPEM(e *ETCDService) {
	if e.CACert != "" {
		if err := checkCertPEM(e.CACert); err != nil {
			v.errorf("services.etcd.ca_cert", "Give the PEM certificate of the CA that signed the external etcd's certificates.", "invalid external etcd CA certificate: %v", err)
		}
	}
	if e.Cert == "" || e.Key == "" {
		return
	}
	if err := checkCertPEM(e.Cert); err != nil {
		v.errorf("services.etcd.cert", "Give the PEM client certificate the API server presents to the external etcd.", "invalid external etcd client certificate: %v", err)
	} else if _, err := tls.X509KeyPair([]byte(e.Cert), []byte(e.Key)); err != nil {
		v.errorf("services.etcd.key", "Give the PEM private key of services.etcd.cert.", "the external etcd client key is not cert's private key: %v", err)
	}
}

func checkCertPEM(s string) error {
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return fmt.Errorf("no PEM block found")
	}
	_, err := x509.ParseCertificate(block.Bytes)
	return err
}

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
	for _, cfg := range []struct {
		name, key string
		set       bool
	}{
		{"aws", "awsCloudProvider", cp.AWSCloudProvider != nil},
		{"azure", "azureCloudProvider", cp.AzureCloudProvider != nil},
		{"openstack", "openstackCloudProvider", cp.OpenstackCloudProvider != nil},
		{"vsphere", "vsphereCloudProvider", cp.VsphereCloudProvider != nil},
		{"harvester", "harvesterCloudProvider", cp.HarvesterCloudProvider != nil},
	} {
		if cfg.set && cp.Name != cfg.name {
			v.errorf("cloud_provider.name", fmt.Sprintf("Set cloud_provider.name: %s, or remove %s.", cfg.name, cfg.key),
				"cloud_provider.%s is given but cloud_provider.name is %q", cfg.key, cp.Name)
		}
	}
	v.cloudProvider(c)
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
		for _, cfg := range []struct {
			name, key string
			set       bool
		}{
			{"aws", "awsCloudProvider", cp.AWSCloudProvider != nil},
			{"azure", "azureCloudProvider", cp.AzureCloudProvider != nil},
			{"openstack", "openstackCloudProvider", cp.OpenstackCloudProvider != nil},
			{"vsphere", "vsphereCloudProvider", cp.VsphereCloudProvider != nil},
			{"harvester", "harvesterCloudProvider", cp.HarvesterCloudProvider != nil},
		} {
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
	if !ok || c.SystemImages.Kubernetes == "" {
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

func (v *validator) upgradeStrategy(c *Cluster) {
	u := c.UpgradeStrategy
	p := "upgrade_strategy"
	v.budget(p+".max_unavailable_worker", u.MaxUnavailableWorker, 1)
	v.budget(p+".max_unavailable_controlplane", u.MaxUnavailableControlplane, 1)
	if d := u.DrainInput; d != nil {
		if d.Timeout < 1 || d.Timeout > 10800 {
			v.errorf(p+".node_drain_input.timeout", "", "timeout must be from 1 to 10800 seconds, got %d", d.Timeout)
		}
		if d.GracePeriod < -1 {
			v.errorf(p+".node_drain_input.grace_period", "Use -1 for each pod's own grace period.", "grace_period must be -1 or more, got %d", d.GracePeriod)
		}
		// RKE's parseNodeDrainInput decodes node_drain_input again, by its
		// json names, when one of these three keys is missing, which loses
		// ignore_daemonsets (ignoreDaemonSets there): RKE's drain then
		// ignores DaemonSets.
		_, timeout := v.pos[p+".node_drain_input.timeout"]
		_, grace := v.pos[p+".node_drain_input.grace_period"]
		if d.IgnoreDaemonSets != nil && !*d.IgnoreDaemonSets && (!timeout || !grace) {
			v.warnf(p+".node_drain_input.ignore_daemonsets", "RKE's parser drops it then, and RKE drains ignoring DaemonSets; rigger reads it. Give timeout and grace_period too, for both to read it.",
				"RKE ignores ignore_daemonsets: false unless timeout and grace_period are given too")
		}
	}
}

// budget checks a count-or-percentage value such as max_unavailable_worker.
func (v *validator) budget(p, s string, least int) {
	if _, err := ParseBudget(s, least); err != nil {
		v.errorf(p, fmt.Sprintf("Give a number of nodes (at least %d) or a percentage (10%%).", least), "%v", err)
	}
}

// Budget is a number of nodes given as a count or a percentage.
type Budget struct {
	N       int
	Percent bool
}

// ParseBudget reads `3` or `25%`; the value must be at least least (as a
// count, or as a percentage above zero when least is 1).
func ParseBudget(s string, least int) (Budget, error) {
	num, pct := strings.CutSuffix(strings.TrimSpace(s), "%")
	n, err := strconv.Atoi(num)
	switch {
	case err != nil:
		return Budget{}, fmt.Errorf("%q is neither a number nor a percentage", s)
	case pct && (n > 100 || n < least):
		return Budget{}, fmt.Errorf("%q is not a percentage from %d%% to 100%%", s, least)
	case n < least:
		return Budget{}, fmt.Errorf("%q must be at least %d", s, least)
	}
	return Budget{N: n, Percent: pct}, nil
}

// Of resolves b against total nodes: a percentage rounds down, and the
// result is at least least.
func (b Budget) Of(total, least int) int {
	n := b.N
	if b.Percent {
		n = total * b.N / 100
	}
	return max(n, least)
}

func (v *validator) registries(c *Cluster) {
	if len(c.PrivateRegistries) > 0 && c.EnableCRIDockerd != nil && !*c.EnableCRIDockerd {
		v.warnf("private_registries", "Set enable_cri_dockerd: true, or have the nodes hold the pods' images.",
			"the kubelet's pulls of pod images get no credentials: as RKE, rigger hands them to rke-tools' kubelet entrypoint, which runs only with enable_cri_dockerd: true")
	}
	defaults := 0
	seen := map[string]bool{}
	for i, r := range c.PrivateRegistries {
		p := fmt.Sprintf("private_registries[%d]", i)
		if url := cmp.Or(r.URL, "docker.io"); seen[url] {
			v.warnf(p+".url", "Give each registry once.", "registry %s is given more than once: the last entry's credentials are used, as in RKE", url)
		} else {
			seen[url] = true
		}
		// As in RKE, a registry without url is Docker Hub's (docker.io).
		if strings.Contains(r.URL, "://") {
			v.errorf(p+".url", "Give host[:port], as in image names.", "url %q must not include a scheme", r.URL)
		}
		if r.Password != "" && r.User == "" {
			v.warnf(p+".user", "Give the registry's user too.", "a password is given without a user: it is sent with an empty user name, as RKE sends it, which most registries refuse")
		}
		if r.ECRCredentialPlugin != nil {
			v.errorf(p+".ecr_credential_plugin", "Give the registry's user and password instead: for Amazon ECR, user AWS and the password `aws ecr get-login-password` prints (valid 12 hours).",
				"ecr_credential_plugin is not supported by rigger: it does not ask Amazon ECR for tokens, nor set up the kubelet's ecr-login credential helper as RKE does")
		}
		if r.IsDefault {
			if defaults++; defaults > 1 {
				v.warnf(p+".is_default", "Mark one registry is_default.", "more than one registry is marked is_default: the first one's url prefixes the system images, as in RKE")
			}
		}
	}
}

// bastion checks bastion_host. As in RKE, one without an address is no
// jump host: `rke config` writes one with every key empty in every file.
func (v *validator) bastion(c *Cluster) {
	b := c.BastionHost
	if b == nil {
		return
	}
	if b.Address == "" {
		if *b != (BastionHost{}) {
			v.warnf("bastion_host", "Give the jump host's address, or remove bastion_host.", "bastion_host has no address: no jump host is used, and its other keys are ignored")
		}
		return
	}
	if b.User == "" {
		v.errorf("bastion_host.user", "", "bastion_host has no user")
	}
	v.port("bastion_host.port", b.Port)
}

func (v *validator) misc(c *Cluster) {
	v.restore(&c.Restore)
	if c.IgnoreDockerVersion != nil && *c.IgnoreDockerVersion {
		v.warnf("ignore_docker_version", "Run rigger plan, apply or serve with --ignore-docker-version to skip the check, as rke up's flag.",
			"rke up ignores ignore_docker_version and checks each node's Docker version unless given --ignore-docker-version, and so does rigger")
	}
	if rc := c.RotateCertificates; rc != nil {
		for i, s := range rc.Services {
			v.oneOf(fmt.Sprintf("rotate_certificates.services[%d]", i), s, false,
				"etcd", "kubelet", "kube-apiserver", "kube-proxy", "kube-scheduler", "kube-controller-manager")
		}
	}
	if c.AddonJobTimeout < 0 {
		v.errorf("addon_job_timeout", "", "addon_job_timeout must be at least 1 second")
	}
	if c.PrefixPath != "" && !path.IsAbs(c.PrefixPath) {
		v.errorf("prefix_path", "", "prefix_path %q is not an absolute path", c.PrefixPath)
	}
}

// notWritten refuses settings that rigger reads but cannot carry out yet,
// so that they are refused when cluster.yml is read rather than when a plan
// is made. (The planner's own refusals stay as a second line.)
func (v *validator) notWritten(c *Cluster) {
	if c.PrefixPath != "" {
		v.errorf("prefix_path", "Remove prefix_path: rigger does not write its files under a prefix path yet.", "prefix_path is not supported by rigger yet")
	}
	// As RKE (rke encrypt rotate-key refuses both): only the key rigger
	// generates is rotated.
	if se := c.Services.KubeAPI.SecretsEncryptionConfig; c.RotateEncryptionKey {
		switch {
		case se == nil || !se.Enabled:
			v.errorf("rotate_encryption_key", "Set services.kube-api.secrets_encryption_config.enabled: true, or remove rotate_encryption_key.",
				"rotate_encryption_key: secrets encryption is not enabled, there is no key to rotate")
		case se.CustomConfig != nil:
			v.errorf("rotate_encryption_key", "Remove rotate_encryption_key. To rotate a key of your custom_config, add the new key second in custom_config and apply, move it first and apply, rewrite the Secrets (kubectl get secrets -A -o json | kubectl replace -f -), then remove the old key and apply again.",
				"rotate_encryption_key: rigger rotates only the key it generates, not one of secrets_encryption_config.custom_config")
		}
	}
}

// etcdCertNames refuses two etcd nodes whose certificates would have the
// same name: RKE's (and rigger's) kube-etcd-<internal address or address>,
// with '.' and ':' as '-'.
func (v *validator) etcdCertNames(c *Cluster) {
	if len(c.Services.Etcd.ExternalURLs) > 0 {
		return
	}
	seen := map[string]int{}
	for i, n := range c.Nodes {
		if !slices.Contains(n.Role, RoleEtcd) || n.Address == "" {
			continue
		}
		a := n.Address
		if n.InternalAddress != "" && n.InternalAddress != n.Address {
			a = n.InternalAddress
		}
		name := "kube-etcd-" + strings.NewReplacer(".", "-", ":", "-").Replace(strings.ToLower(a))
		if j, dup := seen[name]; dup {
			v.errorf(fmt.Sprintf("nodes[%d].address", i), fmt.Sprintf("nodes[%d] gets the same certificate name: an etcd certificate is named after the internal_address (or address), with '.' and ':' as '-'. Give the nodes addresses that differ after that.", j),
				"the etcd certificate of this node would be named %s, as another node's", name)
			continue
		}
		seen[name] = i
	}
}

// snapshotNameRE and maxSnapshotName are the rules of
// etcdsnap.CheckName (which imports spec), so that a restore request
// rigger cannot carry out is refused when cluster.yml is read.
var snapshotNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+-]*$`)

const (
	maxSnapshotName = 200
	// maxRestoreID bounds restore.id, which is kept in the state directory
	// and printed.
	maxRestoreID = 200
)

func (v *validator) restore(r *Restore) {
	if !r.Restore {
		if r.ID != "" {
			v.warnf("restore.id", "Set restore.restore to true to request the restore, or remove restore.id.", "restore.id is set but restore.restore is false: nothing is restored")
		}
		return
	}
	n := r.SnapshotName
	switch {
	case n == "":
		v.errorf("restore.snapshot_name", "Name the snapshot to restore (see `rigger snapshot list`).", "restore is requested without a snapshot_name")
	case len(n) > maxSnapshotName || !snapshotNameRE.MatchString(n) || strings.HasSuffix(n, ".json") || strings.HasSuffix(n, ".part"):
		v.errorf("restore.snapshot_name", "Snapshot names have letters, digits, '.', '_', '-', ':' and '+' only, start with a letter or digit, do not end in .json or .part and have at most 200 characters (see `rigger snapshot list`).",
			"%q cannot name a snapshot rigger restores", n)
	}
	id := r.ID
	switch {
	case id == "":
	case len(id) > maxRestoreID:
		v.errorf("restore.id", "Use a shorter id: a date, a ticket number.", "restore.id has %d characters, at most %d are allowed", len(id), maxRestoreID)
	case strings.TrimSpace(id) != id || strings.IndexFunc(id, unicode.IsControl) >= 0:
		v.errorf("restore.id", "Use printable characters without leading or trailing spaces.", "restore.id %q has control characters or leading or trailing spaces", id)
	}
}

func (v *validator) rigger(c *Cluster) {
	r := &c.Rigger
	if v.oneOf("rigger.ssh.host_key_policy", r.SSH.HostKeyPolicy, false, HostKeyStrict, HostKeyAcceptNew, HostKeyOff) && r.SSH.HostKeyPolicy == HostKeyOff {
		v.warnf("rigger.ssh.host_key_policy", "Anyone on the path to a node can impersonate it. Use accept-new to trust first keys and check them afterwards.", "SSH host keys are not checked")
	}
	if r.SSH.ConnectTimeout.Std() < time.Second {
		v.errorf("rigger.ssh.connect_timeout", "", "connect_timeout must be at least 1s")
	}
	if r.SSH.KeepaliveInterval.Std() < time.Second {
		v.errorf("rigger.ssh.keepalive_interval", "", "keepalive_interval must be at least 1s")
	}
	if r.MaxParallel < 0 {
		v.errorf("rigger.max_parallel", "", "max_parallel must be at least 1")
	}
	v.budget("rigger.max_removed_nodes", r.MaxRemovedNodes, 0)
	v.oneOf("rigger.stale_nodes", r.StaleNodes, false, StaleNodesReport, StaleNodesDelete)
	for i, o := range r.Addons.Exclude {
		p := fmt.Sprintf("rigger.addons.exclude[%d]", i)
		if o.Kind == "" || o.Name == "" {
			v.errorf(p, "Give the object's kind and name, and its namespace unless the kind is cluster-scoped.", "an excluded object needs a kind and a name")
		}
	}
}

// Kubernetes name syntax (k8s.io/apimachinery/pkg/util/validation), written
// out here so that spec stays free of Kubernetes dependencies.
var (
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	qualifiedRE  = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

func dns1123SubdomainErrors(s string) []string {
	var errs []string
	if len(s) > 253 {
		errs = append(errs, "must be no more than 253 characters")
	}
	for label := range strings.SplitSeq(s, ".") {
		if !dns1123Label.MatchString(label) || len(label) > 63 {
			errs = append(errs, "must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
			break
		}
	}
	return errs
}

func qualifiedNameErrors(s string) []string {
	name := s
	if prefix, n, ok := strings.Cut(s, "/"); ok {
		if prefix == "" || len(dns1123SubdomainErrors(prefix)) > 0 {
			return []string{"prefix part must be a DNS subdomain"}
		}
		name = n
	}
	switch {
	case name == "":
		return []string{"name part must be non-empty"}
	case len(name) > 63:
		return []string{"name part must be no more than 63 characters"}
	case !qualifiedRE.MatchString(name):
		return []string{"name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"}
	}
	return nil
}

func labelValueErrors(s string) []string {
	switch {
	case s == "":
		return nil
	case len(s) > 63:
		return []string{"must be no more than 63 characters"}
	case !qualifiedRE.MatchString(s):
		return []string{"must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"}
	}
	return nil
}

// validSocketPath: an absolute, clean path of at most 1024 bytes made of
// letters, digits and / . _ - + @, so that it reads the same in a shell
// line and in a bind mount.
func validSocketPath(p string) bool {
	if len(p) > 1024 || !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
		return false
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+@", r)) {
			return false
		}
	}
	return true
}
