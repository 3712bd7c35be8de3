package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// TestSnapshotterLoad: the etcd-rolling-snapshots container makes its
// cluster from its configuration file and the node's certificates: the
// node alone as etcd member (with its etcd container), every node for the
// sidecar, its name as taker. A file that does not parse is a
// configuration error (the container exits); a missing one or missing
// certificates are retried.
func TestSnapshotterLoad(t *testing.T) {
	dir := t.TempDir()
	ssl := filepath.Join(dir, "ssl")
	set, _, err := pki.Ensure(nil, pki.Request{ClusterName: "c", ServiceClusterIPRange: "10.43.0.0/16", ClusterDomain: "cluster.local",
		Nodes: []pki.Node{{Name: "10.0.0.1", Address: "10.0.0.1", InternalAddress: "10.0.0.1", Hostname: "n1", Etcd: true}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ssl, 0o700); err != nil {
		t.Fatal(err)
	}
	for p, b := range pki.Files(set) {
		if err := os.WriteFile(filepath.Join(ssl, filepath.Base(p)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	on := true
	cfg := desired.SnapshotterConfig{
		Cluster: "c", KubernetesVersion: "v1.31.4-rancher1-1", Node: "10.0.0.2",
		Etcd:        desired.Container{Name: desired.Etcd, Image: "etcd:v3", Env: []string{"ETCDCTL_API=3"}},
		Nodes:       []desired.Node{{Address: "10.0.0.1", InternalAddress: "10.0.0.1", Roles: []string{"controlplane"}}, {Address: "10.0.0.2", InternalAddress: "192.168.0.2", Roles: []string{"etcd"}}},
		HelperImage: "alpine", Backup: &spec.BackupConfig{Enabled: &on, IntervalHours: 6},
	}
	b, _ := json.Marshal(cfg)
	conf := filepath.Join(dir, "etcd-snapshotter.json")
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l := &snapshotterLoader{config: conf, sslDir: ssl}
	cl, release, err := l.load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	release()
	if cl.Name != "c" || cl.Taker != "etcd-rolling-snapshots on 10.0.0.2" || cl.Backup.IntervalHours != 6 || cl.HelperImage != "alpine" || cl.Slots == nil {
		t.Errorf("cluster %+v", cl)
	}
	if len(cl.Desired.Nodes) != 2 || len(cl.Desired.Nodes[0].Containers) != 0 || len(cl.Desired.Nodes[1].Containers) != 1 || cl.Desired.Nodes[1].Containers[0].Image != "etcd:v3" {
		t.Errorf("desired %+v: want the node itself as the only etcd member", cl.Desired)
	}
	if _, err := cl.PKI.ClientTLS(); err != nil {
		t.Errorf("client TLS from the node's kube-node certificate: %v", err)
	}

	var ce *etcdsnap.ConfigError
	if err := os.WriteFile(conf, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.load(t.Context()); !errors.As(err, &ce) || !strings.Contains(err.Error(), "rigger apply") {
		t.Errorf("load of a damaged file: %v, want a configuration error saying to apply again", err)
	}
	cfg.Node = "10.0.0.9"
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.load(t.Context()); !errors.As(err, &ce) || !strings.Contains(err.Error(), "10.0.0.9") {
		t.Errorf("load with an unknown node: %v, want a configuration error naming it", err)
	}
	for _, bad := range []*snapshotterLoader{{config: filepath.Join(dir, "missing.json"), sslDir: ssl}, {config: conf, sslDir: filepath.Join(dir, "nossl")}} {
		if _, _, err := bad.load(t.Context()); err == nil || errors.As(err, &ce) {
			t.Errorf("load %+v: %v, want an error that is retried", bad, err)
		}
	}
}
