package spec

import (
	"strings"
	"testing"
)

// TestPastRKEValidation: what validate says of a cluster on rigger's
// versions past RKE's table, and of extra_args that name a flag the
// components' Kubernetes removed.
func TestPastRKEValidation(t *testing.T) {
	const node = "nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\n"
	const noIngress = "ingress: {provider: none}\n"
	type want struct {
		severity Severity
		path     string   // the diagnostic's path
		says     []string // in its summary or detail
	}
	for _, tc := range []struct {
		name  string
		yml   string
		wants []want // every error and warning, in any order
	}{
		{name: "1.33 of the table", yml: "kubernetes_version: v1.33.13-rigger1\n" + noIngress},
		{name: "1.37 of the table, no image to build", yml: "kubernetes_version: v1.37.2-rigger3\n" + noIngress},
		{name: "a newer patch of a minor of the table", yml: "kubernetes_version: v1.36.9\n" + noIngress},
		{name: "1.37 with the user's image", yml: "kubernetes_version: v1.37.2-rigger3\nsystem_images: {kubernetes: registry.example.com/hyperkube:v1.37.2}\n" + noIngress},
		{
			name: "an earlier table's entry",
			yml:  "kubernetes_version: v1.36.3-rigger1\n" + noIngress,
			wants: []want{{SeverityError, "kubernetes_version", []string{
				"v1.36.3-rigger1 was an entry of an earlier rigger's table", "write v1.36.3 or v1.36.6-rigger1"}}},
		},
		{
			name: "a pinned image of another release",
			yml:  "kubernetes_version: v1.34.9-rigger2\nsystem_images: {kubernetes: registry.example.com/hyperkube:v1.32.13}\n" + noIngress,
			wants: []want{{SeverityWarning, "system_images.kubernetes", []string{
				"registry.example.com/hyperkube:v1.32.13 runs Kubernetes 1.32.13, not the 1.34.9 of kubernetes_version v1.34.9-rigger2",
				"every component keeps running 1.32.13", "remove system_images.kubernetes"}}},
		},
		{
			name: "ingress-nginx by default on rigger's version",
			yml:  "kubernetes_version: v1.34.9-rigger2\n",
			wants: []want{{SeverityError, "ingress.provider", []string{
				"has no ingress-nginx", "retired upstream in March 2026", "ingress.provider: none", "Gateway API"}}},
		},
		{
			name:  "ingress-nginx with the user's images",
			yml:   "kubernetes_version: v1.34.9-rigger2\nsystem_images: {ingress: registry.example.com/ingress-nginx/controller:v1.14.5, ingress_backend: registry.example.com/defaultbackend:1.5, ingress_webhook: registry.example.com/kube-webhook-certgen:v1.6.9}\n",
			wants: []want{{SeverityWarning, "ingress.provider", []string{"retired ingress controller"}}},
		},
		{name: "ingress-nginx on RKE's default", yml: ""},
		{
			name: "the kubelet's pod-infra-container-image on 1.35",
			yml:  "kubernetes_version: v1.35.10-rigger1\n" + noIngress + "services: {kubelet: {extra_args: {pod-infra-container-image: registry.example.com/pause:3.10}}}\n",
			wants: []want{{SeverityError, "services.kubelet.extra_args.pod-infra-container-image", []string{
				"kubelet of Kubernetes 1.35 has no flag --pod-infra-container-image (removed in 1.35)", "kubernetes#133779", "Remove it from services.kubelet.extra_args"}}},
		},
		{name: "the kubelet's pod-infra-container-image on 1.34", yml: "kubernetes_version: v1.34.9-rigger2\n" + noIngress + "services: {kubelet: {extra_args: {pod-infra-container-image: registry.example.com/pause:3.10}}}\n"},
		{
			name: "the API server's cloud-provider on 1.33, written with dashes",
			yml:  "kubernetes_version: v1.33.13-rigger1\n" + noIngress + "services: {kube-api: {extra_args: {--cloud-provider: external}}}\n",
			wants: []want{
				{SeverityWarning, "services.kube-api.extra_args.--cloud-provider", []string{"starts with a dash"}},
				{SeverityError, "services.kube-api.extra_args.--cloud-provider", []string{"kube-apiserver of Kubernetes 1.33 has no flag --cloud-provider (removed in 1.33)", "kubernetes#130162"}},
			},
		},
		{name: "the API server's cloud-provider on RKE's 1.32", yml: "services: {kube-api: {extra_args: {cloud-provider: external}}}\n"},
		{
			name:  "the kubelet's cloud-config in extra_args_array on 1.37",
			yml:   "kubernetes_version: v1.37.2-rigger3\nsystem_images: {kubernetes: registry.example.com/hyperkube:v1.37.2}\n" + noIngress + "services: {kubelet: {extra_args_array: {cloud-config: [/etc/kubernetes/cloud.conf]}}}\n",
			wants: []want{{SeverityError, "services.kubelet.extra_args_array.cloud-config", []string{"removed in 1.34", "kubernetes#130161"}}},
		},
		{
			name: "the series of the image's tag, not kubernetes_version",
			yml:  "system_images: {kubernetes: registry.example.com/hyperkube:v1.35.4}\nservices: {kubelet: {extra_args: {register-schedulable: \"false\"}}}\n",
			wants: []want{
				{SeverityError, "services.kubelet.extra_args.register-schedulable", []string{"kubelet of Kubernetes 1.35 has no flag --register-schedulable (removed in 1.34)"}},
				{SeverityWarning, "ingress.provider", []string{"retired ingress controller"}},
				{SeverityWarning, "system_images.kubernetes", []string{"runs Kubernetes 1.35.4, not the 1.32.13 of kubernetes_version"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, diags := Parse([]byte(node+tc.yml), "cluster.yml")
			matched := make([]bool, len(diags))
			for _, w := range tc.wants {
				found := false
				for i, d := range diags {
					if matched[i] || d.Severity != w.severity || d.Path != w.path {
						continue
					}
					text := d.Summary + "\n" + d.Detail
					all := true
					for _, s := range w.says {
						all = all && strings.Contains(text, s)
					}
					if all {
						matched[i], found = true, true
						break
					}
				}
				if !found {
					t.Errorf("no %v at %s saying %q; got:\n%v", w.severity, w.path, w.says, diags)
				}
			}
			for i, d := range diags {
				if !matched[i] {
					t.Errorf("unexpected: %v", d)
				}
			}
		})
	}
}

// TestPinnedKubernetesTable: the table's own kubernetes image never counts
// as pinned to another release, at any version of the table.
func TestPinnedKubernetesTable(t *testing.T) {
	for _, version := range KubernetesVersions() {
		c, diags := Parse([]byte("nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\ningress: {provider: none}\nkubernetes_version: "+version+"\n"), "cluster.yml")
		if diags.HasErrors() {
			t.Fatalf("%s: %v", version, diags)
		}
		if msg, _ := PinnedKubernetes(c); msg != "" {
			t.Errorf("%s: %s", version, msg)
		}
	}
}
