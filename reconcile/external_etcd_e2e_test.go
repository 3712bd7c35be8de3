package reconcile_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	rt "github.com/rigger/rigger/reconcile/reconciletest"
	"github.com/rigger/rigger/sandbox/sandboxtest"
	"github.com/rigger/rigger/spec"
)

// testExternalEtcd converges a second cluster on the fifth node whose API
// server uses an external etcd (services.etcd.external_urls): the
// first cluster's etcd, under another key prefix, with that cluster's CA
// and a client certificate it signed. Its API server can start only if
// rigger wrote the CA, certificate and key it is pointed at.
func testExternalEtcd(ctx context.Context, t *testing.T, f *clusterFixture) {
	f.converge(ctx, t)
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(f.a.StateDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var urls []string
	for _, n := range f.first3() {
		urls = append(urls, "https://"+n+":2379")
	}
	// Written in cluster.yml, as a user would: without it, a cluster
	// without etcd nodes is refused.
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(sandboxtest.ClusterYML(t, f.s, map[int][]string{4: {spec.RoleControlPlane, spec.RoleWorker}})), &doc); err != nil {
		t.Fatal(err)
	}
	doc["cluster_name"] = "external-etcd"
	doc["services"].(map[string]any)["etcd"] = map[string]any{
		"external_urls": urls, "path": "/external-etcd",
		"ca_cert": read("kube-ca.pem"), "cert": read("kube-node.pem"), "key": read("kube-node-key.pem"),
	}
	yml, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	ext := rt.Load(t, string(yml))
	ext.Rigger.SSH.ConnectTimeout = f.c.Rigger.SSH.ConnectTimeout
	rt.NetworkOnly(ext)
	a := rt.New(t)
	a.Apply(ctx, t, ext)
	a.InSync(ctx, t, ext)

	// Each cluster sees its own objects only: the prefix is the external
	// cluster's.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "in-external-etcd", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := a.Client(ctx, t, ext).CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	checkConfigMap(ctx, t, a.Client(ctx, t, ext), cm)
	if _, err := f.a.Client(ctx, t, f.c).CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the first cluster reads the external cluster's ConfigMap: %v", err)
	}
}
