package sysaddons

import (
	"fmt"
	"maps"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/rkemeta"
)

// network.plugin values.
const (
	pluginNone    = "none"
	pluginFlannel = "flannel"
	pluginCanal   = "canal"
	pluginCalico  = "calico"
	pluginWeave   = "weave"
	pluginACI     = "aci"
)

// FollowsNodeSubnets says network plugin plugin (network.plugin) gives
// each pod an address of its Node's pod subnet (spec.podCIDR): flannel, and
// canal, whose pod network is flannel's. Calico and Weave manage addresses
// of their own.
func FollowsNodeSubnets(plugin string) bool {
	return plugin == pluginFlannel || plugin == pluginCanal
}

// network.options keys RKE reads (cluster/network.go).
const (
	optFlannelIface                       = "flannel_iface"
	optFlannelBackendType                 = "flannel_backend_type"
	optFlannelBackendPort                 = "flannel_backend_port"
	optFlannelBackendVNI                  = "flannel_backend_vni"
	optKubeFlannelPriorityClass           = "kube_flannel_priority_class_name"
	optCanalIface                         = "canal_iface"
	optCanalFlannelBackendType            = "canal_flannel_backend_type"
	optCanalFlannelBackendPort            = "canal_flannel_backend_port"
	optCanalFlannelBackendVNI             = "canal_flannel_backend_vni"
	optCanalFlexVolPluginDir              = "canal_flex_volume_plugin_dir"
	optCanalPriorityClass                 = "canal_priority_class_name"
	optCalicoCloudProvider                = "calico_cloud_provider"
	optCalicoFlexVolPluginDir             = "calico_flex_volume_plugin_dir"
	optCalicoNodePriorityClass            = "calico_node_priority_class_name"
	optCalicoKubeControllersPriorityClass = "calico_kube_controllers_priority_class_name"
	optWeaveNetPriorityClass              = "weave_net_priority_class_name"
	// optWeavePassword is where RKE keeps weave_network_provider.password
	// (sic: the template's key, not an option name).
	optWeavePassword = "WeavePassword"
)

// RKE's defaults of network.options (cluster/defaults.go) and of the flannel
// backend (cluster/network.go).
const (
	defaultFlannelBackend       = "vxlan"
	defaultFlannelPort          = "8472"
	defaultFlannelVNI           = "1"
	defaultNetworkCloudProvider = "none"
	defaultFlexVolPluginDir     = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/nodeagent~uds"
	flannelVxLanPort            = 8472 // RKE's FlannelVxLanPort
	flannelVxLanVNI             = 1    // RKE's FlannelVxLanNetworkIdentify
)

// Paths RKE's canal and calico templates are given (RKE's pki package):
// the kube-node certificate and kubeconfig every node has, and the API
// server through the node's local proxy.
const (
	kubeNodeKubeconfig = "/etc/kubernetes/ssl/kubecfg-kube-node.yaml"
	kubeNodeCert       = "/etc/kubernetes/ssl/kube-node.pem"
	kubeNodeKey        = "/etc/kubernetes/ssl/kube-node-key.pem"
	kubeCACert         = "/etc/kubernetes/ssl/kube-ca.pem"
	localAPIRoot       = "https://127.0.0.1:6443"
)

// networkOptions returns network.options with the defaults RKE's
// setClusterNetworkDefaults adds: those of the plugin, and the values of
// the *_network_provider blocks, each only where the key is absent (a key
// given with an empty value stays empty, as in RKE).
func networkOptions(n *spec.Network) map[string]string {
	defaults := map[string]string{}
	switch n.Plugin {
	case pluginCalico:
		defaults[optCalicoCloudProvider] = defaultNetworkCloudProvider
		defaults[optCalicoFlexVolPluginDir] = defaultFlexVolPluginDir
	case pluginFlannel:
		defaults[optFlannelBackendType] = defaultFlannelBackend
		defaults[optFlannelBackendPort] = defaultFlannelPort
		defaults[optFlannelBackendVNI] = defaultFlannelVNI
	case pluginCanal:
		defaults[optCanalFlannelBackendType] = defaultFlannelBackend
		defaults[optCanalFlannelBackendPort] = defaultFlannelPort
		defaults[optCanalFlannelBackendVNI] = defaultFlannelVNI
		defaults[optCanalFlexVolPluginDir] = defaultFlexVolPluginDir
	}
	if p := n.CalicoNetworkProvider; p != nil {
		cp := p.CloudProvider
		if cp == "" {
			cp = defaultNetworkCloudProvider
		}
		defaults[optCalicoCloudProvider] = cp
	}
	if p := n.FlannelNetworkProvider; p != nil {
		defaults[optFlannelIface] = p.Iface
	}
	if p := n.CanalNetworkProvider; p != nil {
		defaults[optCanalIface] = p.Iface
	}
	if p := n.WeaveNetworkProvider; p != nil {
		defaults[optWeavePassword] = p.Password
	}
	opts := maps.Clone(n.Options)
	if opts == nil {
		opts = map[string]string{}
	}
	for k, v := range defaults {
		if _, ok := opts[k]; !ok {
			opts[k] = v
		}
	}
	return opts
}

// network renders the network plugin as RKE's deployNetworkPlugin does.
func network(c *spec.Cluster) ([]Manifest, error) {
	n := &c.Network
	opts := networkOptions(n)
	strategy := withDaemonSetDefaults(toDaemonSetStrategy(n.UpdateStrategy)).daemonSet()
	clusterCIDR := c.Services.KubeController.ClusterCIDR
	rbac := c.Authorization.Mode
	im := &c.SystemImages

	var addon string
	var data map[string]any
	switch n.Plugin {
	case pluginNone:
		return nil, nil
	case pluginFlannel:
		backend, err := flannelBackend(opts, optFlannelBackendType, optFlannelBackendVNI, optFlannelBackendPort)
		if err != nil {
			return nil, err
		}
		addon = rkemeta.AddonFlannel
		data = map[string]any{
			"ClusterCIDR":                  clusterCIDR,
			"Image":                        im.Flannel,
			"CNIImage":                     im.FlannelCNI,
			"FlannelInterface":             opts[optFlannelIface],
			"FlannelBackend":               backend,
			"RBACConfig":                   rbac,
			"ClusterVersion":               rkemeta.Series(c.KubernetesVersion),
			"NodeSelector":                 n.NodeSelector,
			"UpdateStrategy":               strategy,
			"KubeFlannelPriorityClassName": opts[optKubeFlannelPriorityClass],
		}
	case pluginCalico:
		addon = rkemeta.AddonCalico
		data = map[string]any{
			"KubeCfg":                                kubeNodeKubeconfig,
			"ClusterCIDR":                            clusterCIDR,
			"CNIImage":                               im.CalicoCNI,
			"NodeImage":                              im.CalicoNode,
			"Calicoctl":                              im.CalicoCtl,
			"ControllersImage":                       im.CalicoControllers,
			"CloudProvider":                          opts[optCalicoCloudProvider],
			"FlexVolImg":                             im.CalicoFlexVol,
			"RBACConfig":                             rbac,
			"NodeSelector":                           n.NodeSelector,
			"MTU":                                    n.MTU,
			"UpdateStrategy":                         strategy,
			"Tolerations":                            toTolerations(n.Tolerations),
			"FlexVolPluginDir":                       opts[optCalicoFlexVolPluginDir],
			"CalicoNodePriorityClassName":            opts[optCalicoNodePriorityClass],
			"CalicoKubeControllersPriorityClassName": opts[optCalicoKubeControllersPriorityClass],
		}
	case pluginCanal:
		backend, err := flannelBackend(opts, optCanalFlannelBackendType, optCanalFlannelBackendVNI, optCanalFlannelBackendPort)
		if err != nil {
			return nil, err
		}
		addon = rkemeta.AddonCanal
		data = map[string]any{
			"ClientCertPath":                         kubeNodeCert,
			"APIRoot":                                localAPIRoot,
			"ClientKeyPath":                          kubeNodeKey,
			"ClientCAPath":                           kubeCACert,
			"KubeCfg":                                kubeNodeKubeconfig,
			"ClusterCIDR":                            clusterCIDR,
			"NodeImage":                              im.CanalNode,
			"CNIImage":                               im.CanalCNI,
			"ControllersImage":                       im.CanalControllers,
			"CanalFlannelImg":                        im.CanalFlannel,
			"RBACConfig":                             rbac,
			"CanalInterface":                         opts[optCanalIface],
			"FlexVolImg":                             im.CanalFlexVol,
			"FlannelBackend":                         backend,
			"NodeSelector":                           n.NodeSelector,
			"MTU":                                    n.MTU,
			"UpdateStrategy":                         strategy,
			"Tolerations":                            toTolerations(n.Tolerations),
			"FlexVolPluginDir":                       opts[optCanalFlexVolPluginDir],
			"CanalPriorityClassName":                 opts[optCanalPriorityClass],
			"CalicoKubeControllersPriorityClassName": opts[optCalicoKubeControllersPriorityClass],
			"BlackholeRoute":                         n.CanalBlackholeRoute() && rkemeta.FlannelHasBlackholeRoute(im.CanalFlannel),
		}
	case pluginWeave:
		// Validation refuses weave from Kubernetes 1.30 on, as RKE does.
		addon = rkemeta.AddonWeave
		data = map[string]any{
			"ClusterCIDR":               clusterCIDR,
			"WeavePassword":             opts[optWeavePassword],
			"Image":                     im.WeaveNode,
			"CNIImage":                  im.WeaveCNI,
			"WeaveLoopbackImage":        im.Alpine,
			"RBACConfig":                rbac,
			"NodeSelector":              n.NodeSelector,
			"MTU":                       n.MTU,
			"UpdateStrategy":            weaveStrategy(strategy),
			"WeaveNetPriorityClassName": opts[optWeaveNetPriorityClass],
		}
	case pluginACI:
		// RKE's doAciDeploy builds some 150 settings from
		// aci_network_provider and computes IP pools from its subnets;
		// rigger does not carry that over yet.
		return nil, fmt.Errorf("network.plugin: rigger does not deploy the Cisco ACI CNI yet; deploy it yourself with network.plugin: none, or use RKE for this cluster")
	default:
		return nil, fmt.Errorf("network.plugin: unsupported network plugin %q; use canal, flannel, calico or none", n.Plugin)
	}
	return manifest(c, NetworkPlugin, addon, data)
}

// weaveStrategy is the update strategy rigger hands RKE's weave template.
// That template writes `type: RollingUpdate` after the strategy it is
// given, so RKE's manifest has the key type twice; kubectl keeps the last
// one, while rigger's decoder refuses a key given twice. rigger therefore
// gives the template the strategy without its type, which makes exactly
// the object kubectl makes of RKE's manifest (a RollingUpdate DaemonSet,
// whatever network.update_strategy.strategy says).
func weaveStrategy(s *appsv1.DaemonSetUpdateStrategy) *appsv1.DaemonSetUpdateStrategy {
	if s.RollingUpdate == nil {
		return nil
	}
	return &appsv1.DaemonSetUpdateStrategy{RollingUpdate: s.RollingUpdate}
}

// flannelBackend is the FlannelBackend RKE hands the flannel and canal
// templates: the backend type, and the VXLAN network identifier and port,
// read as whole numbers (RKE's atoiWithDefault: empty is the default).
func flannelBackend(opts map[string]string, typeKey, vniKey, portKey string) (map[string]any, error) {
	vni, err := atoiWithDefault(opts, vniKey, flannelVxLanVNI)
	if err != nil {
		return nil, err
	}
	port, err := atoiWithDefault(opts, portKey, flannelVxLanPort)
	if err != nil {
		return nil, err
	}
	return map[string]any{"Type": opts[typeKey], "VNI": vni, "Port": port}, nil
}

// atoiWithDefault is RKE's atoiWithDefault of the option key. RKE logs a
// value that is not a number as a warning and deploys no network plugin at
// all; rigger stops with an error that names the key.
func atoiWithDefault(opts map[string]string, key string, def int) (int, error) {
	v := opts[key]
	if v == "" {
		return def, nil
	}
	i, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("network.options.%s: %q is not a whole number; give a number, or remove it for RKE's default %d", key, v, def)
	}
	return i, nil
}
