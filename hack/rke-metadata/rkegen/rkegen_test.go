package rkegen

import (
	"strings"
	"testing"
	"testing/fstest"
)

// small is a data.json with one version, for the generator's own checks.
func small(images, ranges string) []byte {
	return []byte(`{
  "K8sVersionRKESystemImages": {"v1.31.5-rancher1-1": {` + images + `}, "v1.20.1-rancher1-1": {"etcd": "old"}},
  "K8sVersionServiceOptions": {"v1.31": {"kubeapi": {"a": "b"}}, "v1.20": {"kubeapi": {"old": "x"}}},
  "K8sVersionInfo": {"v1.31": {"minRKEVersion": "1.7.0-rc0"}},
  "K8sVersionDockerInfo": {"1.31": ["27.5.x"], "1.20": ["19.03.x"]},
  "K8sVersionedTemplates": {"calico": {` + ranges + `}, "templateKeys": {"new": "kind: New", "old": "kind: Old"}},
  "RKEDefaultK8sVersions": {"default": "v1.31.5-rancher1-1"}
}`)
}

func TestGenerate(t *testing.T) {
	o, err := Generate(small(`"etcd": "e", "kubernetes": "k"`, `">=1.24.0-rancher0": "new", ">=1.8.0 <1.23.0": "old"`))
	if err != nil {
		t.Fatal(err)
	}
	src := string(o.Go)
	for _, want := range []string{`"v1.31.5-rancher1-1", SystemImages{`, `Etcd:`, `"1.31": {"27.5.x"}`, `">=1.8.0 <1.23.0":`, `MinRKEVersion: "1.7.0-rc0"`} {
		if !strings.Contains(src, want) {
			t.Errorf("the source lacks %s", want)
		}
	}
	for _, unwanted := range []string{`v1.20`, `"1.20"`, `19.03.x`} {
		if strings.Contains(src, unwanted) {
			t.Errorf("the source keeps %s, from before 1.24", unwanted)
		}
	}
	if len(o.Templates) != 1 || o.Templates["new"] != "kind: New" {
		t.Errorf("templates kept: %v, want only new", o.Templates)
	}
	files, err := o.Files()
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{}
	for name, b := range files {
		fsys[name] = &fstest.MapFile{Data: b}
	}
	texts, err := ReadTemplates(fsys)
	if err != nil || len(texts) != 1 || texts["new"] != "kind: New" {
		t.Errorf("ReadTemplates = %v, %v", texts, err)
	}
}

func TestGenerateRefuses(t *testing.T) {
	for name, c := range map[string]struct{ images, ranges, want string }{
		"an image key it does not know":       {`"etcd": "e", "cilium": "c"`, `">=1.8.0": "new"`, `image key "cilium"`},
		"overlapping ranges":                  {`"etcd": "e"`, `">=1.8.0 <1.30.0": "old", ">=1.29.0": "new"`, "depends on map order"},
		"a comparator it cannot reason about": {`"etcd": "e"`, `">1.8.0": "new"`, `comparator ">"`},
		"a template that is missing":          {`"etcd": "e"`, `">=1.8.0": "gone"`, `template "gone"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Generate(small(c.images, c.ranges))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Generate: %v, want an error with %q", err, c.want)
			}
		})
	}
}
