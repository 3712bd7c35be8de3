package sysaddons

import (
	"testing"
	"text/template"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rigger/rigger/spec/rkemeta"
)

// TestTemplatesParse parses every template a version of rigger's table can
// reach with the functions rigger gives the templates: a template calling
// a function rigger leaves out would fail here, not in a cluster.
func TestTemplatesParse(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range rkemeta.Versions() {
		for _, a := range rkemeta.Addons() {
			key, text, err := rkemeta.Template(a, v)
			if err != nil {
				if key == "" {
					continue // no template of this add-on for v (aci of some versions)
				}
				t.Fatalf("%s %s: %v", a, v, err)
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			if _, err := template.New(key).Funcs(templateFuncs()).Parse(text); err != nil {
				t.Errorf("template %s: %v", key, err)
			}
		}
	}
	if len(seen) < 60 {
		t.Errorf("parsed %d templates; rigger keeps 65", len(seen))
	}
}

func TestToYAML(t *testing.T) {
	got, err := toYAML(withDaemonSetDefaults(nil).daemonSet())
	if err != nil {
		t.Fatal(err)
	}
	if want := "rollingUpdate:\n  maxUnavailable: 1\ntype: RollingUpdate"; got != want {
		t.Errorf("toYAML = %q, want %q", got, want)
	}
}

func TestIntOrString(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want *intstr.IntOrString
	}{
		{"", nil},
		{"1", ptr(intstr.FromInt32(1))},
		{"0", ptr(intstr.FromInt32(0))},
		{"25%", ptr(intstr.FromString("25%"))},
		{"99999999999", ptr(intstr.FromString("99999999999"))},
	} {
		if diff := cmp.Diff(tc.want, intOrString(tc.in)); diff != "" {
			t.Errorf("intOrString(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestControllerVersion(t *testing.T) {
	for _, tc := range []struct {
		image, want string
		ok          bool
	}{
		{"rancher/nginx-ingress-controller:nginx-1.12.0-rancher1", "1.12.0", true},
		{"registry.example.com:5000/rancher/nginx-ingress-controller:nginx-1.2.1-rancher1", "1.2.1", true},
		{"rancher/nginx-ingress-controller:0.21.0-rancher3", "0.21.0", true},
		{"registry.k8s.io/ingress-nginx/controller:v1.12.0", "v1.12.0", true},
		{"rancher/nginx-ingress-controller", "", false},
	} {
		got, ok := controllerVersion(tc.image)
		if got != tc.want || ok != tc.ok {
			t.Errorf("controllerVersion(%q) = %q, %v; want %q, %v", tc.image, got, ok, tc.want, tc.ok)
		}
	}
}

func TestStrategyDefaults(t *testing.T) {
	one, quarter := ptr(intstr.FromInt32(1)), ptr(intstr.FromString("25%"))
	for _, tc := range []struct {
		name      string
		in, want  *deploymentStrategy
		dnsWanted *deploymentStrategy
	}{
		{
			name:      "none given",
			want:      defaultDeploymentStrategy(),
			dnsWanted: &deploymentStrategy{Strategy: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: one, MaxSurge: ptr(intstr.FromInt32(0))}},
		},
		{
			name:      "Recreate is kept",
			in:        &deploymentStrategy{Strategy: "Recreate"},
			want:      &deploymentStrategy{Strategy: "Recreate"},
			dnsWanted: &deploymentStrategy{Strategy: "Recreate"},
		},
		{
			name:      "maxSurge only",
			in:        &deploymentStrategy{Strategy: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: one}},
			want:      &deploymentStrategy{Strategy: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: one, MaxUnavailable: quarter}},
			dnsWanted: &deploymentStrategy{Strategy: "RollingUpdate", RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: one, MaxUnavailable: one}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, withDeploymentDefaults(clone(tc.in))); diff != "" {
				t.Errorf("withDeploymentDefaults (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.dnsWanted, withDNSDefaults(clone(tc.in), "coredns")); diff != "" {
				t.Errorf("withDNSDefaults (-want +got):\n%s", diff)
			}
		})
	}
}

func clone(s *deploymentStrategy) *deploymentStrategy {
	if s == nil {
		return nil
	}
	c := *s
	if s.RollingUpdate != nil {
		r := *s.RollingUpdate
		c.RollingUpdate = &r
	}
	return &c
}
