package spec

import (
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
)

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
		// The values are secret (rigger:"secret-env"): an entry without
		// "=" may be one whole, so only a name before "=" is quoted.
		switch {
		case !ok:
			v.errorf(fmt.Sprintf("%s.extra_env[%d]", p, i), "Write it as NAME=value.", "environment entry has no \"=\": it is not NAME=value (not shown: values here are secret)")
		case !envName.MatchString(name):
			v.errorf(fmt.Sprintf("%s.extra_env[%d]", p, i), "Write it as NAME=value.", "environment variable name %q is not one: letters, digits and _, not starting with a digit", name)
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
