package sysaddons

import (
	"fmt"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/spec"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The system add-ons, each named as RKE names the resources of its add-on
// job (RKE's NetworkPluginResourceName, getAddonResourceName(provider),
// MetricsServerAddonResourceName, IngressAddonResourceName).
const (
	// NetworkPlugin is the network plugin: network.plugin flannel, canal,
	// calico or weave.
	NetworkPlugin = "rke-network-plugin"
	// CoreDNS is dns.provider coredns: CoreDNS and its
	// cluster-proportional-autoscaler.
	CoreDNS = "rke-coredns-addon"
	// KubeDNS is dns.provider kube-dns: kube-dns and its autoscaler.
	KubeDNS = "rke-kube-dns-addon"
	// Nodelocal is NodeLocal DNSCache: dns.nodelocal.ip_address.
	Nodelocal = "rke-nodelocal-addon"
	// MetricsServer is monitoring.provider metrics-server.
	MetricsServer = "rke-metrics-addon"
	// Ingress is ingress.provider nginx: ingress-nginx.
	Ingress = "rke-ingress-controller"
)

// Names lists every system add-on, in RKE's deploy order. An add-on of
// this list that Render does not return for a cluster is one the cluster
// does not want (RKE deletes it: a DNS provider switched, nodelocal,
// metrics-server or ingress switched off).
func Names() []string {
	return []string{NetworkPlugin, CoreDNS, KubeDNS, Nodelocal, MetricsServer, Ingress}
}

// Manifest is one system add-on as RKE renders it: the manifest RKE hands
// `kubectl apply`.
type Manifest struct {
	// Name of the add-on, one of Names.
	Name string
	// Template is the key of RKE's template it was rendered from, which
	// depends on kubernetes_version (flannel-v0.26.4).
	Template string
	// YAML is the rendered manifest, multi-document YAML.
	YAML []byte
	// Recreate lists objects of the manifest that RKE deletes, when they
	// exist, every time before it applies the add-on: ingress-nginx's
	// admission Jobs, whose pod template cannot change, so that applying a
	// changed one fails. Render passes them on as the add-on's Recreate:
	// rigger deletes them only when their apply fails so.
	Recreate []addons.ObjectRef
	// Remove lists objects that RKE deletes, when they exist, after it
	// applied the add-on, because the manifest no longer has them:
	// ingress-nginx's default backend when ingress.default_backend is
	// false. rigger's prune deletes them when rigger applied them; a
	// cluster RKE built has them in no inventory.
	Remove []addons.ObjectRef
}

// Render returns the system add-ons of a loaded (defaulted and valid)
// cluster, in RKE's deploy order: the network plugin, the DNS provider,
// NodeLocal DNSCache, metrics-server, the ingress controller; those the
// cluster switches off (`none`) are left out. All but the network plugin
// are Concurrent. Each is rendered from RKE's
// template for kubernetes_version with the data RKE builds for it (see
// Manifests) and decoded; each object's Source names the template, the
// document and its line ("template flannel-v0.26.4: document 3 at line
// 57").
//
// The network plugin's pods that run in the node's network namespace get
// the node-local API server (nodeLocalAPI), where RKE's manifest has them
// use the `kubernetes` Service: the one difference from RKE's objects.
//
// Render is a pure function of c: it reads nothing but c and rigger's copy
// of RKE's templates, and does not change c.
func Render(c *spec.Cluster) ([]addons.Addon, error) {
	ms, err := Manifests(c)
	if err != nil {
		return nil, err
	}
	out := make([]addons.Addon, 0, len(ms))
	for _, m := range ms {
		objs, err := m.Objects()
		if err != nil {
			return nil, err
		}
		a := addons.Addon{Name: m.Name, Objects: objs, Recreate: m.Recreate}
		if m.Name == NetworkPlugin {
			nodeLocalAPI(a.Objects)
			a.NodeReady = networkReady(c)
		} else {
			// DNS, NodeLocal DNSCache, metrics-server and the ingress
			// controller need the pod network, not one another: they
			// are waited for at once, where RKE waits for each in turn.
			a.Concurrent = true
		}
		out = append(out, a)
	}
	return out, nil
}

// FlannelPublicIP is the annotation flannel (and canal's flannel) sets on
// its Node once it holds the node's subnet lease, just before it writes
// the /run/flannel/subnet.env its CNI plugin reads.
const FlannelPublicIP = "flannel.alpha.coreos.com/public-ip"

// networkReady is the network plugin's readiness on each Ready Node, for
// the add-ons after it: flannel's pods have no readiness probe and run
// before flannel holds the node's subnet, and a pod created on the node
// then fails to get a network (until the kubelet retries, often later
// than addon_job_timeout). With a node_selector the plugin runs on some
// Nodes only: nil.
func networkReady(c *spec.Cluster) func(*unstructured.Unstructured) string {
	if (c.Network.Plugin != pluginFlannel && c.Network.Plugin != pluginCanal) || len(c.Network.NodeSelector) > 0 {
		return nil
	}
	return func(n *unstructured.Unstructured) string {
		if n.GetAnnotations()[FlannelPublicIP] == "" {
			return "flannel holds no subnet lease for the node yet (no " + FlannelPublicIP + " annotation)"
		}
		return ""
	}
}

// Objects decodes the manifest, each object's Source naming the template.
// An object the manifest gives more than once is kept once, as the last
// one: kubectl, which RKE applies the manifest with, applies each in turn,
// so the last one is what the cluster ends up with. (RKE's weave manifest
// gives its ServiceAccount twice, the second time with labels.)
func (m Manifest) Objects() ([]addons.Object, error) {
	objs, err := addons.Decode("template "+m.Template, m.YAML, addons.Limits{})
	if err != nil {
		return nil, fmt.Errorf("addon %s: %w", m.Name, err)
	}
	type id struct{ group, kind, namespace, name string }
	last := map[id]int{}
	for i, o := range objs {
		gvk := o.GroupVersionKind()
		last[id{gvk.Group, gvk.Kind, o.GetNamespace(), o.GetName()}] = i
	}
	out := objs[:0]
	for i, o := range objs {
		gvk := o.GroupVersionKind()
		if last[id{gvk.Group, gvk.Kind, o.GetNamespace(), o.GetName()}] == i {
			out = append(out, o)
		}
	}
	return out, nil
}

// Manifests renders the system add-ons of a loaded cluster as RKE does,
// in RKE's deploy order (see Render), without decoding them. For each, the
// template is the one RKE's templates.GetVersionedTemplates picks for
// kubernetes_version, and the data is the map or struct RKE's
// deployNetworkPlugin, deployDNS, deployMetricServer and deployIngress
// build: the same keys, RKE's defaults for what cluster.yml leaves empty,
// and RKE's reading of network.options. Where rigger differs from RKE the
// code says so.
//
// An error names the cluster.yml key at fault and what to do about it.
func Manifests(c *spec.Cluster) ([]Manifest, error) {
	var out []Manifest
	for _, step := range []func(*spec.Cluster) ([]Manifest, error){network, dns, metricsServer, ingress} {
		ms, err := step(c)
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
	}
	return out, nil
}

// manifest renders one add-on from RKE's template of addon (an rkemeta
// add-on key).
func manifest(c *spec.Cluster, name, addon string, data any) ([]Manifest, error) {
	key, y, err := compile(addon, c.KubernetesVersion, data)
	if err != nil {
		return nil, fmt.Errorf("addon %s: %w", name, err)
	}
	return []Manifest{{Name: name, Template: key, YAML: y}}, nil
}

// Network is the network plugin's add-on of want, if any.
func Network(want []addons.Addon) []addons.Addon {
	for _, a := range want {
		if a.Name == NetworkPlugin {
			return []addons.Addon{a}
		}
	}
	return nil
}
