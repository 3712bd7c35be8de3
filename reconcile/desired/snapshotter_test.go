package desired

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rigger/rigger/spec"
)

// snapshotterYML is a cluster with an etcd-only node, a controlplane
// node and a worker, rigger's image as cert_downloader, and S3.
const snapshotterYML = `
cluster_name: snap
nodes:
  - {address: 10.0.0.1, user: u, role: [etcd]}
  - {address: 10.0.0.2, user: u, role: [etcd, controlplane]}
  - {address: 10.0.0.3, user: u, role: [worker]}
system_images:
  cert_downloader: rigger/rigger:v1
services:
  etcd:
    backup_config:
      interval_hours: 6
      s3backupconfig: {endpoint: s3.example.com, bucket_name: b, access_key: AKIAEXAMPLE, secret_key: the-secret-key}
`

func TestRollingSnapshotsContainer(t *testing.T) {
	bin := pretendBinary
	for _, tc := range []struct {
		name   string
		change string
		want   bool
		binary bool // rigger's binary in system_images.alpine
	}{
		{"default: on every etcd node", "", true, false},
		{"snapshot: false", "\n    snapshot: false", false, false},
		{"backup_config.enabled: false", "\n    backup_config: {enabled: false}", false, false},
		{"rke-tools: rigger's binary in the alpine image, as RKE", "\nsystem_images: {cert_downloader: rancher/rke-tools:v0.1.111}", true, true},
		{"rigger.image runs it", "\nsystem_images: {cert_downloader: rancher/rke-tools:v0.1.111}\nrigger: {image: rigger/rigger:v1}", true, false},
		// A mirror of rke-tools at another path is not rigger's image.
		{"rke-tools mirrored: rigger's binary in the alpine image", "\nsystem_images: {cert_downloader: registry.corp:5000/mirrors/rke-tools:v0.1.111}", true, true},
		{"another image: rigger's binary in the alpine image", "\nsystem_images: {cert_downloader: registry.corp/tools/cert-helper@sha256:" + strings.Repeat("a", 64) + "}", true, true},
		{"rigger's image mirrored runs it", "\nsystem_images: {cert_downloader: registry.corp:5000/mirrors/rigger:v1}", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yml := snapshotterYML
			switch {
			case strings.HasPrefix(tc.change, "\nsystem_images"):
				yml = strings.Replace(yml, "system_images:\n  cert_downloader: rigger/rigger:v1\n", "", 1) + tc.change
			case strings.Contains(tc.change, "backup_config"):
				yml = yml[:strings.Index(yml, "    backup_config:")] + strings.TrimPrefix(tc.change, "\n") + "\n"
			default:
				yml = strings.Replace(yml, "  etcd:", "  etcd:"+tc.change, 1)
			}
			c := parse(t, yml)
			d := build(t, c)
			for _, n := range d.Nodes {
				got, has := n.Container(EtcdRollingSnapshots)
				if want := tc.want && n.HasRole(spec.RoleEtcd); has != want {
					t.Fatalf("%s: has %s = %v, want %v", n.Address, EtcdRollingSnapshots, has, want)
				}
				files, err := ConfigFiles(c, &n)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := files[SnapshotterConfigFile]; ok != has {
					t.Errorf("%s: %s written = %v, want %v", n.Address, SnapshotterConfigFile, ok, has)
				}
				if !has {
					continue
				}
				want := Container{
					Name: EtcdRollingSnapshots, Image: "rigger/rigger:v1",
					Args:        []string{"etcd-snapshotter", "--config=/etc/kubernetes/etcd-snapshotter.json"},
					Binds:       []string{"/etc/kubernetes:/etc/kubernetes:ro", "/var/run/docker.sock:/var/run/docker.sock"},
					NetworkMode: NetworkModeHost, RestartPolicy: RestartAlways, Confined: true,
				}
				if tc.binary {
					want.Image, want.Entrypoint, want.Binary = c.SystemImages.Alpine, []string{BinaryPath}, bin.ID
				} else if strings.Contains(tc.change, "mirrors/rigger") {
					want.Image = "registry.corp:5000/mirrors/rigger:v1"
				}
				if diff := cmp.Diff(want, *got, cmpIgnoreLabels); diff != "" {
					t.Errorf("%s: container (-want +got):\n%s", n.Address, diff)
				}
				// The S3 secret is in the 0600 file only, never in the
				// container's spec (its labels) nor its env.
				for k, v := range got.Labels {
					if strings.Contains(v, "the-secret-key") || strings.Contains(v, "AKIAEXAMPLE") {
						t.Errorf("%s: label %s holds an S3 credential", n.Address, k)
					}
				}
				var cfg SnapshotterConfig
				if err := json.Unmarshal(files[SnapshotterConfigFile], &cfg); err != nil {
					t.Fatal(err)
				}
				etcd, _ := n.Container(Etcd)
				if cfg.Cluster != "snap" || cfg.Node != n.Address || cfg.Etcd.Image != etcd.Image || !slices.Equal(cfg.Etcd.Env, etcd.Env) ||
					len(cfg.Nodes) != 3 || cfg.Backup == nil || cfg.Backup.IntervalHours != 6 || cfg.Backup.S3BackupConfig.SecretKey != "the-secret-key" ||
					cfg.HelperImage != c.SystemImages.Alpine {
					t.Errorf("%s: configuration %+v", n.Address, cfg)
				}
			}
		})
	}
}

var cmpIgnoreLabels = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Labels" }, cmp.Ignore())
