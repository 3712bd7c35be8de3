package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestConfigVersions(t *testing.T) {
	defer func(f func() string) { today = f }(today)
	today = func() string { return "2026-12-02" }
	out, _, code := run(t, "config", "versions")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	blocks := strings.Split(strings.TrimSpace(out), "\n\n")
	if len(blocks) != 104+5+1 {
		t.Fatalf("%d blocks listed, want RKE v1.8.14's 104 versions from 1.24 on, rigger's 5 and the newest of each minor", len(blocks))
	}
	summary := blocks[len(blocks)-1]
	blocks = blocks[:len(blocks)-1]
	for _, want := range []string{
		"The newest patch release of each minor version:\n  1.24: v1.24.17-rancher1-1 (past end of life: 2023-07-28)\n",
		"  1.32: v1.32.13-rancher1-3 (past end of life: 2026-02-28)\n",
		"  1.34: v1.34.9-rigger2 (past end of life: 2026-10-27)\n  1.35: v1.35.10-rigger1 (supported upstream until 2027-02-28)\n",
		"  1.37: v1.37.2-rigger3 (supported upstream until 2027-10-28)\n",
		"written as upstream writes it (v1.37.3), runs with the images of the same rule",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	var riggers []string
	for _, b := range blocks {
		if first, _, _ := strings.Cut(b, "\n"); strings.Contains(first, " (rigger's: past RKE's table)") {
			riggers = append(riggers, first)
		}
	}
	if want := []string{
		"v1.33.13-rigger1 (rigger's: past RKE's table) (past end of life: 2026-06-28)",
		"v1.34.9-rigger2 (rigger's: past RKE's table) (past end of life: 2026-10-27)",
		"v1.35.10-rigger1 (rigger's: past RKE's table) (supported upstream until 2027-02-28)",
		"v1.36.6-rigger1 (rigger's: past RKE's table) (supported upstream until 2027-06-28)",
		"v1.37.2-rigger3 (rigger's: past RKE's table) (supported upstream until 2027-10-28)",
	}; !slices.Equal(riggers, want) {
		t.Errorf("marked as rigger's:\n%s\nwant\n%s", strings.Join(riggers, "\n"), strings.Join(want, "\n"))
	}
	if b := blocks[len(blocks)-1]; !strings.HasSuffix(b, "\n  components:\n"+
		"    kube-apiserver: registry.k8s.io/kube-apiserver:v1.37.2\n"+
		"    kube-controller-manager: registry.k8s.io/kube-controller-manager:v1.37.2\n"+
		"    kube-proxy: registry.k8s.io/kube-proxy:v1.37.2\n"+
		"    kube-scheduler: registry.k8s.io/kube-scheduler:v1.37.2\n"+
		"    kubelet: ghcr.io/siderolabs/kubelet:v1.37.2-fat") || strings.Contains(b, "  kubernetes: ") {
		t.Errorf("rigger's newest version:\n%s", b)
	}
	if !strings.HasPrefix(blocks[0], "v1.24.2-rancher1-1 (past end of life: 2023-07-28)\n  etcd: rancher/mirrored-coreos-etcd:v3.5.4\n") {
		t.Errorf("first version:\n%s", blocks[0])
	}
	var defaults []string
	for _, b := range blocks {
		if first, _, _ := strings.Cut(b, "\n"); strings.Contains(first, " (default)") {
			defaults = append(defaults, first)
		}
	}
	if len(defaults) != 1 || defaults[0] != "v1.32.13-rancher1-3 (default) (extended life: rke-extended-life images need a SUSE Rancher subscription) (past end of life: 2026-02-28)" {
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
	if v.Version != "v1.31.5-rancher1-1" || v.Default || v.ExtendedLife || v.Table != "rke" || len(v.Components) != 0 || !v.PastEndOfLife || v.EndOfLife != "2025-10-28" || v.SystemImages["kubernetes"] != "rancher/hyperkube:v1.31.5-rancher1" ||
		v.SystemImages["aci_ovs_container"] != "noiro/openvswitch:6.1.1.2.81c2369" || len(v.SystemImages) != 37 {
		t.Errorf("v1.31.5-rancher1-1 -o json: %+v (%d images)", v, len(v.SystemImages))
	}

	out, _, code = run(t, "config", "versions", "-o", "json", "v1.32.7-rancher1-1")
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Versions) != 1 ||
		!got.Versions[0].ExtendedLife || got.Versions[0].SystemImages["kubernetes"] != "rke-extended-life/hyperkube:v1.32.7-rancher1" {
		t.Errorf("v1.32.7-rancher1-1 -o json: exit %d, %v, %+v", code, err, got)
	}

	out, _, code = run(t, "config", "versions", "-o", "json", "v1.33.13-rigger1", "v1.37.2-rigger3", "v1.36.9")
	got = versionsJSON{}
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil || len(got.Versions) != 3 ||
		got.Versions[0].Table != "rigger" || got.Versions[0].SystemImages["kubernetes"] != "" || !got.Versions[0].PastEndOfLife ||
		got.Versions[0].Components["kube-apiserver"] != "registry.k8s.io/kube-apiserver:v1.33.13" ||
		got.Versions[1].Table != "rigger" || got.Versions[1].PastEndOfLife || got.Versions[1].EndOfLife != "2027-10-28" ||
		got.Versions[1].SystemImages["etcd"] != "registry.k8s.io/etcd:3.7.0-0" ||
		got.Versions[2].Components["kubelet"] != "ghcr.io/siderolabs/kubelet:v1.36.9-fat" || got.Versions[2].SystemImages["etcd"] != "registry.k8s.io/etcd:3.6.11-0" {
		t.Errorf("rigger's versions -o json: exit %d, %v, %+v", code, err, got)
	}
	if len(got.Minors) != 3 || got.Minors[1].Newest != "v1.36.9" || got.Minors[2].Minor != 37 || got.Minors[2].Newest != "v1.37.2-rigger3" {
		t.Errorf("minors -o json: %+v", got.Minors)
	}
	if !strings.Contains(out, `"table": "rigger"`) || !strings.Contains(out, `"past_end_of_life": false`) {
		t.Errorf("rigger's versions -o json lacks the marks:\n%s", out)
	}

	_, errOut, code := run(t, "config", "versions", "v1.35.8-rigger1")
	if code == 0 || !strings.Contains(errOut, "earlier rigger's table") || !strings.Contains(errOut, "write v1.35.8 or v1.35.10-rigger1") {
		t.Errorf("a retired entry: exit %d, %s", code, errOut)
	}

	_, errOut, code = run(t, "config", "versions", "v1.31.5")
	if code == 0 || !strings.Contains(errOut, "did you mean v1.31.5-rancher1-1?") {
		t.Errorf("an upstream spelling: exit %d, %s", code, errOut)
	}
}
