package sysaddons

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/rigger/rigger/reconcile/addons"
)

// The API server as every node reaches it without kube-proxy: a
// controlplane node's own kube-apiserver, and nginx-proxy on the others,
// listen on 127.0.0.1:6443 (the API servers' certificates name
// 127.0.0.1), as the node's kubelet and kube-proxy use it.
const (
	nodeLocalAPIHost = "127.0.0.1"
	nodeLocalAPIPort = "6443"
)

// nodeLocalAPI gives the containers of the network plugin's pods that run
// in the node's network namespace the node-local API server as their
// in-cluster API server (KUBERNETES_SERVICE_HOST and _PORT, which client-go
// reads), where the manifest sets neither. Otherwise they reach it
// through the `kubernetes` Service, which works on a node only once
// kube-proxy there has programmed it: flannel started on a new node before
// that fails its first call after 30 s ("Failed to create SubnetManager:
// … dial tcp 10.43.0.1:443: i/o timeout") and is restarted after a
// back-off, and the node has no pod network for a minute or more. The
// network plugin is what a node needs before anything else runs there, so
// it depends on nothing but the node's own path to the API server, as
// Calico's eBPF and RKE2's kube-proxy-less set-ups do. Pods on the pod
// network are left as they are. objs are changed in place.
func nodeLocalAPI(objs []addons.Object) {
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		if host, _, _ := unstructured.NestedBool(o.Object, "spec", "template", "spec", "hostNetwork"); !host {
			continue
		}
		for _, field := range []string{"initContainers", "containers"} {
			path := []string{"spec", "template", "spec", field}
			cs, ok, _ := unstructured.NestedSlice(o.Object, path...)
			if !ok {
				continue
			}
			for i, c := range cs {
				m, ok := c.(map[string]any)
				if !ok {
					continue
				}
				cs[i] = withAPIEnv(m)
			}
			_ = unstructured.SetNestedSlice(o.Object, cs, path...)
		}
	}
}

// withAPIEnv adds KUBERNETES_SERVICE_HOST and _PORT for the node-local API
// server to a container, unless its env names either.
func withAPIEnv(c map[string]any) map[string]any {
	env, _ := c["env"].([]any)
	for _, e := range env {
		if m, ok := e.(map[string]any); ok && (m["name"] == "KUBERNETES_SERVICE_HOST" || m["name"] == "KUBERNETES_SERVICE_PORT") {
			return c
		}
	}
	c["env"] = append(env,
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": nodeLocalAPIHost},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": nodeLocalAPIPort},
	)
	return c
}
