package sysaddons_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
)

// TestErrors checks that what RKE cannot render, or would render wrong or
// skip with only a warning, is an error naming the cluster.yml key.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(c *spec.Cluster)
		want   []string // substrings of the error
	}{
		{
			name: "flannel VNI that is not a number",
			change: func(c *spec.Cluster) {
				c.Network.Plugin = "flannel"
				c.Network.Options = map[string]string{"flannel_backend_vni": "4k"}
			},
			want: []string{`network.options.flannel_backend_vni: "4k" is not a whole number`, "RKE's default 1"},
		},
		{
			name: "canal port that is not a number",
			change: func(c *spec.Cluster) {
				c.Network.Options = map[string]string{"canal_flannel_backend_port": "vxlan"}
			},
			want: []string{`network.options.canal_flannel_backend_port: "vxlan" is not a whole number`, "RKE's default 8472"},
		},
		{
			name:   "aci",
			change: func(c *spec.Cluster) { c.Network.Plugin = "aci" },
			want:   []string{"network.plugin: rigger does not deploy the Cisco ACI CNI yet"},
		},
		{
			name: "ingress extra env with a key EnvVar does not have",
			change: func(c *spec.Cluster) {
				c.Ingress.ExtraEnvs = []spec.Object{{"name": "A", "value": "b"}, {"name": "TZ", "vaule": "UTC"}}
			},
			want: []string{"ingress.extra_envs[1]", `unknown field "vaule"`, "v1.EnvVar"},
		},
		{
			name: "ingress extra volume of the wrong shape",
			change: func(c *spec.Cluster) {
				c.Ingress.ExtraVolumes = []spec.Object{{"name": "tz", "hostPath": "/etc/localtime"}}
			},
			want: []string{"ingress.extra_volumes[0]", "v1.Volume"},
		},
		{
			name: "ingress option that breaks the manifest",
			change: func(c *spec.Cluster) {
				c.Ingress.Options = map[string]string{"server-snippet": `return 200 "ok";`}
			},
			want: []string{"addon rke-ingress-controller: template nginxingress-v1.14.5-rancher1: document", "at line"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := spec.Load(filepath.Join("testdata", "clusters", "defaults.yml"))
			if err != nil {
				t.Fatal(err)
			}
			tc.change(c)
			_, err = sysaddons.Render(c)
			if err == nil {
				t.Fatal("Render succeeded; want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
