package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestConfigVersions(t *testing.T) {
	out, _, code := run(t, "config", "versions")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	blocks := strings.Split(strings.TrimSpace(out), "\n\n")
	if len(blocks) != 104+5 {
		t.Errorf("%d versions listed, want RKE v1.8.14's 104 from 1.24 on and rigger's 5", len(blocks))
	}
	var riggers []string
	for _, b := range blocks {
		if first, _, _ := strings.Cut(b, "\n"); strings.Contains(first, " (rigger's: past RKE's table)") {
			riggers = append(riggers, first)
		}
	}
	if want := []string{
		"v1.33.7-rigger1 (rigger's: past RKE's table)",
		"v1.34.9-rigger1 (rigger's: past RKE's table)",
		"v1.35.8-rigger1 (rigger's: past RKE's table)",
		"v1.36.3-rigger1 (rigger's: past RKE's table) (no public kubernetes image: build one with deploy/hyperkube and set system_images.kubernetes)",
		"v1.37.2-rigger1 (rigger's: past RKE's table) (no public kubernetes image: build one with deploy/hyperkube and set system_images.kubernetes)",
	}; !slices.Equal(riggers, want) {
		t.Errorf("marked as rigger's:\n%s\nwant\n%s", strings.Join(riggers, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(blocks[0], "v1.24.2-rancher1-1\n  etcd: rancher/mirrored-coreos-etcd:v3.5.4\n") {
		t.Errorf("first version:\n%s", blocks[0])
	}
	var defaults []string
	for _, b := range blocks {
		if first, _, _ := strings.Cut(b, "\n"); strings.Contains(first, " (default)") {
			defaults = append(defaults, first)
		}
	}
	if len(defaults) != 1 || defaults[0] != "v1.32.13-rancher1-3 (default) (extended life: rke-extended-life images need a SUSE Rancher subscription)" {
		t.Errorf("marked as default: %v", defaults)
	}
	var extended []string
	for _, b := range blocks {
		if first, _, _ := strings.Cut(b, "\n"); strings.Contains(first, "(extended life: ") {
			extended = append(extended, strings.Fields(first)[0])
		}
	}
	if len(extended) != 13 || extended[0] != "v1.31.11-rancher1-1" || extended[4] != "v1.32.7-rancher1-1" {
		t.Errorf("marked as extended life: %v", extended)
	}

	out, _, code = run(t, "config", "versions", "-o", "json", "v1.31.5-rancher1-1")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	var got versionsJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.RKEVersion != "v1.8.14" || got.Default != "v1.32.13-rancher1-3" || len(got.Versions) != 1 {
		t.Fatalf("versions -o json: %+v", got)
	}
	v := got.Versions[0]
	if v.Version != "v1.31.5-rancher1-1" || v.Default || v.ExtendedLife || v.Table != "rke" || v.NeedsKubernetesImage || v.SystemImages["kubernetes"] != "rancher/hyperkube:v1.31.5-rancher1" ||
		v.SystemImages["aci_ovs_container"] != "noiro/openvswitch:6.1.1.2.81c2369" || len(v.SystemImages) != 37 {
		t.Errorf("v1.31.5-rancher1-1 -o json: %+v (%d images)", v, len(v.SystemImages))
	}

	out, _, code = run(t, "config", "versions", "-o", "json", "v1.32.7-rancher1-1")
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Versions) != 1 ||
		!got.Versions[0].ExtendedLife || got.Versions[0].SystemImages["kubernetes"] != "rke-extended-life/hyperkube:v1.32.7-rancher1" {
		t.Errorf("v1.32.7-rancher1-1 -o json: exit %d, %v, %+v", code, err, got)
	}

	out, _, code = run(t, "config", "versions", "-o", "json", "v1.33.7-rigger1", "v1.37.2-rigger1")
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Versions) != 2 ||
		got.Versions[0].Table != "rigger" || got.Versions[0].NeedsKubernetesImage || got.Versions[0].SystemImages["kubernetes"] != "ghcr.io/cybozu/kubernetes:1.33.7.1" ||
		got.Versions[1].Table != "rigger" || !got.Versions[1].NeedsKubernetesImage || got.Versions[1].SystemImages["kubernetes"] != "" ||
		got.Versions[1].SystemImages["etcd"] != "registry.k8s.io/etcd:3.7.0-0" {
		t.Errorf("rigger's versions -o json: exit %d, %v, %+v", code, err, got)
	}
	if !strings.Contains(out, `"table": "rigger"`) || !strings.Contains(out, `"needs_kubernetes_image": true`) {
		t.Errorf("rigger's versions -o json lacks the marks:\n%s", out)
	}

	_, errOut, code := run(t, "config", "versions", "v1.31.5")
	if code == 0 || !strings.Contains(errOut, "did you mean v1.31.5-rancher1-1?") {
		t.Errorf("an upstream spelling: exit %d, %s", code, errOut)
	}
}
