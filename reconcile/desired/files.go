package desired

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
	"sigs.k8s.io/yaml"
)

// Flags of kube-apiserver that name a file ConfigFiles writes. When the
// user sets one in extra_args or extra_args_array, the file is theirs (as
// in RKE): ConfigFiles leaves it out rather than overwrite it.
const (
	flagAdmissionConfig  = "admission-control-config-file"
	flagAuditPolicy      = "audit-policy-file"
	flagEncryptionConfig = "encryption-provider-config"
	flagAuthnWebhook     = "authentication-token-webhook-config-file"
)

// RKE's admission plugin names and Pod Security levels.
const (
	pluginPodSecurity    = "PodSecurity"
	pluginEventRateLimit = "EventRateLimit"
	podSecurityDefault   = "privileged"
	podSecurityLatest    = "latest"
)

// podSecurityExempt are the namespaces RKE exempts from a restricted
// Pod Security default: its ingress controller and the system's pods.
var podSecurityExempt = []string{"ingress-nginx", "kube-system"}

// ConfigFiles returns the files other than certificates, keys and
// kubeconfigs (pki.NodeFiles) that node n's containers read, keyed by their
// path under /etc/kubernetes as the containers see it; the files step puts
// them under prefix_path as it does the PKI's. The content is RKE's:
//
//   - AdmissionConfigFile (controlplane): the user's admission_configuration,
//     or an AdmissionConfiguration with RKE's PodSecurity plugin for
//     pod_security_configuration (privileged when unset); plus the
//     EventRateLimit plugin when event_rate_limit is enabled and the
//     admission configuration does not configure it already (the limits of
//     event_rate_limit.configuration, or RKE's: 5000 qps, burst 20000).
//   - AuditPolicyFile (controlplane, audit log enabled): the user's policy,
//     or RKE's, which logs every request at the Metadata level.
//   - EncryptionConfigFile (controlplane, secrets encryption enabled with
//     custom_config): the user's custom_config. The one rigger generates
//     (GeneratedEncryption) holds a key of the state directory: the caller
//     adds it (package secretsenc).
//   - AuthnWebhookFile (controlplane, webhook authentication): config_file.
//   - The external etcd's CA, client certificate and key (controlplane,
//     services.etcd.external_urls): ca_cert, cert and key, where the API
//     server's etcd-cafile, etcd-certfile and etcd-keyfile point.
//   - CloudConfigFile (every node, with a cloud provider): customCloudProvider, or RKE's file of the typed block (cloudConfig).
//   - SnapshotterConfigFile (etcd nodes that run EtcdRollingSnapshots):
//     SnapshotterConfig, with backup_config (S3 credentials included).
//
// A file whose flag the user sets in kube-api's extra_args is the user's
// and is left out. c must be defaulted and valid, n built from it by
// Build. The output is the same, byte for byte, for the same input. It
// fails on a setting whose file rigger cannot write yet, saying what to do.
func ConfigFiles(c *spec.Cluster, n *Node) (map[string][]byte, error) {
	out := map[string][]byte{}
	if err := cloudConfig(c, out); err != nil {
		return nil, fmt.Errorf("config files of %s: %w", n.Address, err)
	}
	r, err := runRelease(c)
	if err != nil {
		return nil, fmt.Errorf("config files of %s: %w", n.Address, err)
	}
	if _, ok := n.Container(EtcdRollingSnapshots); ok {
		b, err := snapshotterConfig(c, r, n)
		if err != nil {
			return nil, fmt.Errorf("config files of %s: %w", n.Address, err)
		}
		out[SnapshotterConfigFile] = b
	}
	if !n.HasRole(spec.RoleControlPlane) {
		return out, nil
	}
	api := c.Services.KubeAPI
	user := func(flag string) bool {
		_, a := api.ExtraArgs[flag]
		_, b := api.ExtraArgsArray[flag]
		return a || b
	}
	var errs []error
	add := func(flag, path string, content []byte, err error) {
		switch {
		case err != nil:
			errs = append(errs, err)
		case !user(flag):
			out[path] = content
		}
	}

	b, err := admissionConfig(api, r.minor)
	add(flagAdmissionConfig, AdmissionConfigFile, b, err)

	if a := api.AuditLog; a != nil && a.Enabled && a.Configuration != nil {
		b, err := auditPolicy(a.Configuration.Policy)
		add(flagAuditPolicy, AuditPolicyFile, b, err)
	}
	if e := api.SecretsEncryptionConfig; e != nil && e.Enabled && e.CustomConfig != nil {
		b, err := marshalObject("services.kube-api.secrets_encryption_config.custom_config", e.CustomConfig)
		add(flagEncryptionConfig, EncryptionConfigFile, b, err)
	}
	if e := c.Services.Etcd; len(e.ExternalURLs) > 0 {
		out[certPath(pki.ExternalEtcdCACertName)] = []byte(e.CACert)
		out[certPath(pki.ExternalEtcdClientCertName)] = []byte(e.Cert)
		out[keyPath(pki.ExternalEtcdClientCertName)] = []byte(e.Key)
	}
	if w := c.Authentication.Webhook; w != nil {
		if w.ConfigFile == "" {
			errs = append(errs, errors.New("authentication.webhook.config_file is empty: give the webhook's kubeconfig inline, or remove authentication.webhook"))
		} else {
			add(flagAuthnWebhook, AuthnWebhookFile, []byte(w.ConfigFile), nil)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("config files of %s: %w", n.Address, err)
	}
	return out, nil
}

// cloudConfig adds the cloud provider's configuration, which the API
// server, the controller manager and every kubelet read, as RKE v1.8.14
// makes it (cloudprovider.InitCloudProvider): customCloudProvider as it is;
// else the file RKE writes from vsphereCloudProvider, openstackCloudProvider
// or azureCloudProvider (the last of them given wins, as in RKE); a
// provider that needs no configuration (external, external-aws, aws) gets
// an empty file. Validation refuses the typed blocks rigger does not write
// (awsCloudProvider, harvesterCloudProvider) and those of a Kubernetes
// without the in-tree provider; this refusal is a second line.
func cloudConfig(c *spec.Cluster, out map[string][]byte) error {
	cp := c.CloudProvider
	if cp.Name == "" {
		return nil
	}
	var text []byte
	switch {
	case cp.CustomCloudProvider != "":
		text = []byte(cp.CustomCloudProvider)
	case cp.HarvesterCloudProvider != nil || (cp.AWSCloudProvider != nil && cp.AzureCloudProvider == nil && cp.OpenstackCloudProvider == nil && cp.VsphereCloudProvider == nil):
		return fmt.Errorf("cloud_provider %s: rigger does not write the cloud configuration from awsCloudProvider or harvesterCloudProvider; "+
			"give the provider's configuration file inline in cloud_provider.customCloudProvider", cp.Name)
	case cp.VsphereCloudProvider != nil:
		text = vsphereConfig(cp.VsphereCloudProvider)
	case cp.OpenstackCloudProvider != nil:
		text = openstackConfig(cp.OpenstackCloudProvider)
	case cp.AzureCloudProvider != nil:
		var err error
		if text, err = azureConfig(cp.AzureCloudProvider); err != nil {
			return err
		}
	}
	out[CloudConfigFile] = text
	return nil
}

// admissionConfig is the API server's AdmissionConfiguration.
func admissionConfig(api spec.KubeAPIService, minor int) ([]byte, error) {
	const field = "services.kube-api.admission_configuration"
	cfg := map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AdmissionConfiguration",
	}
	var plugins []any
	if api.AdmissionConfiguration != nil {
		var err error
		if cfg, err = copyObject(field, api.AdmissionConfiguration); err != nil {
			return nil, err
		}
		if p := cfg["plugins"]; p != nil {
			var ok bool
			if plugins, ok = p.([]any); !ok {
				return nil, fmt.Errorf("%s.plugins: not a list", field)
			}
		}
	}
	// RKE sets pod_security_configuration to privileged by default; the
	// user's admission configuration is kept as written unless the user
	// asked for a level and it has no PodSecurity plugin.
	if !hasPlugin(plugins, pluginPodSecurity) && (api.AdmissionConfiguration == nil || api.PodSecurityConfiguration != "") {
		plugins = append(plugins, podSecurityPlugin(api.PodSecurityConfiguration, minor))
	}
	if e := api.EventRateLimit; e != nil && e.Enabled && !hasPlugin(plugins, pluginEventRateLimit) {
		limits := map[string]any(e.Configuration)
		if limits == nil {
			limits = map[string]any{
				"apiVersion": "eventratelimit.admission.k8s.io/v1alpha1",
				"kind":       "Configuration",
				"limits":     []any{map[string]any{"type": "Server", "qps": 5000, "burst": 20000}},
			}
		}
		plugins = append(plugins, map[string]any{"name": pluginEventRateLimit, "configuration": limits})
	}
	if plugins != nil {
		cfg["plugins"] = plugins
	}
	return marshalObject(field, cfg)
}

// podSecurityPlugin is RKE's PodSecurity plugin configuration: privileged
// enforces nothing; restricted (and baseline, which RKE lacks) enforces,
// audits and warns at that level, with RKE's exempt namespaces.
func podSecurityPlugin(level string, minor int) map[string]any {
	if level == "" {
		level = podSecurityDefault
	}
	apiVersion := "pod-security.admission.config.k8s.io/v1"
	if minor < 25 { // v1 is served from Kubernetes 1.25 on
		apiVersion = "pod-security.admission.config.k8s.io/v1beta1"
	}
	defaults := map[string]any{"enforce": level, "enforce-version": podSecurityLatest}
	conf := map[string]any{
		"apiVersion": apiVersion,
		"kind":       "PodSecurityConfiguration",
		"defaults":   defaults,
	}
	if level != podSecurityDefault {
		defaults["audit"], defaults["audit-version"] = level, podSecurityLatest
		defaults["warn"], defaults["warn-version"] = level, podSecurityLatest
		conf["exemptions"] = map[string]any{"namespaces": podSecurityExempt}
	}
	return map[string]any{"name": pluginPodSecurity, "configuration": conf}
}

// hasPlugin reports whether an AdmissionConfiguration's plugins configure name.
func hasPlugin(plugins []any, name string) bool {
	for _, p := range plugins {
		if m, ok := p.(map[string]any); ok && m["name"] == name {
			return true
		}
	}
	return false
}

// auditPolicy is the user's audit Policy or RKE's default.
func auditPolicy(policy spec.Object) ([]byte, error) {
	if policy != nil {
		return marshalObject("services.kube-api.audit_log.configuration.policy", policy)
	}
	return marshalObject("audit policy", map[string]any{
		"apiVersion": "audit.k8s.io/v1",
		"kind":       "Policy",
		"rules":      []any{map[string]any{"level": "Metadata"}},
	})
}

// copyObject returns a deep copy of o with JSON's types, so that it can be
// extended without changing the cluster.
func copyObject(field string, o spec.Object) (map[string]any, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // large integers stay exact
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return m, nil
}

// marshalObject writes v as YAML, keys sorted: the same value gives the
// same bytes.
func marshalObject(field string, v any) ([]byte, error) {
	b, err := yaml.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: write as YAML: %w", field, err)
	}
	return b, nil
}

// GeneratedEncryption reports whether the API servers of c read an
// encryption configuration with a key rigger generates and keeps:
// secrets_encryption_config is enabled without custom_config, and the user
// does not name a file of their own in kube-api's extra_args.
func GeneratedEncryption(c *spec.Cluster) bool {
	api := c.Services.KubeAPI
	e := api.SecretsEncryptionConfig
	if e == nil || !e.Enabled || e.CustomConfig != nil {
		return false
	}
	_, a := api.ExtraArgs[flagEncryptionConfig]
	_, b := api.ExtraArgsArray[flagEncryptionConfig]
	return !a && !b
}
