package sysaddons

import (
	"strings"
	"testing"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/riggermeta"
)

// TestPastRKEManifests renders the system add-ons of every network plugin
// and DNS provider at each of rigger's versions: RKE's templates are
// found for them (their semver ranges are open-ended past 1.32) and use
// the table's images.
func TestPastRKEManifests(t *testing.T) {
	for _, version := range riggermeta.Versions() {
		for _, plugin := range []string{"canal", "flannel", "calico"} {
			for _, dns := range []string{"coredns", "kube-dns"} {
				t.Run(version+"/"+plugin+"/"+dns, func(t *testing.T) {
					yml := "nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\n" +
						"kubernetes_version: " + version + "\ningress: {provider: none}\n" +
						"network: {plugin: " + plugin + "}\ndns: {provider: " + dns + ", nodelocal: {ip_address: 169.254.20.10}}\n"
					c, diags := spec.Parse([]byte(yml), "cluster.yml")
					if diags.HasErrors() {
						t.Fatal(diags)
					}
					ms, err := Manifests(c)
					if err != nil {
						t.Fatal(err)
					}
					all := ""
					for _, m := range ms {
						all += string(m.YAML)
					}
					im, _ := riggermeta.Images(version)
					want := []string{im.MetricsServer, im.Nodelocal}
					switch plugin {
					case "canal":
						want = append(want, im.CanalFlannel, im.CanalNode)
					case "flannel":
						want = append(want, im.Flannel)
					case "calico":
						want = append(want, im.CalicoNode)
					}
					if dns == "coredns" {
						want = append(want, im.CoreDNS)
					}
					for _, w := range want {
						if !strings.Contains(all, w) {
							t.Errorf("no %s in the manifests", w)
						}
					}
				})
			}
		}
	}
}
