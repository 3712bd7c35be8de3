package desired

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rigger/rigger/internal/nodebin"
	"github.com/rigger/rigger/spec"
)

// EtcdRollingSnapshots is the container of scheduled etcd snapshots on
// every etcd node, named as RKE names its own, so that an RKE user
// recognises it and adopting an RKE cluster replaces RKE's.
const EtcdRollingSnapshots = "etcd-rolling-snapshots"

// SnapshotterConfigFile is the etcd-rolling-snapshots container's
// configuration (SnapshotterConfig, JSON), written on each etcd node by the
// files step (mode 0600, as every file rigger writes). It holds the S3
// secret key when one is set: the key is in this file only, never in the
// container's command, environment or labels.
const SnapshotterConfigFile = KubernetesDir + "/etcd-snapshotter.json"

// SnapshotterCommand is the rigger subcommand the container runs.
const SnapshotterCommand = "etcd-snapshotter"

// dockerSocket is the node's Docker socket, bound into the
// etcd-rolling-snapshots container: it takes snapshots with one-shot
// containers of the etcd image on its node, as rigger does from afar.
const dockerSocket = "/var/run/docker.sock"

// SnapshotterConfig is what the etcd-rolling-snapshots container of one
// etcd node reads at every tick of its schedule.
type SnapshotterConfig struct {
	// Cluster is cluster_name, KubernetesVersion kubernetes_version: both
	// go into each snapshot's sidecar.
	Cluster           string `json:"cluster_name"`
	KubernetesVersion string `json:"kubernetes_version"`
	// Node is the address of the node the container runs on; Etcd is its
	// etcd container (its image and ETCDCTL_* settings run etcdctl).
	Node string    `json:"node"`
	Etcd Container `json:"etcd"`
	// Nodes are every node of cluster.yml (without containers), for the
	// sidecar: a restore rebuilds the members from them.
	Nodes []Node `json:"nodes"`
	// HelperImage runs the file tools on the node (system_images.alpine).
	HelperImage string `json:"helper_image"`
	// Backup is services.etcd.backup_config.
	Backup *spec.BackupConfig `json:"backup_config"`
}

// BinaryPath is where rigger's binary is copied in a container that runs
// rigger in an image the node already has (Container.Binary).
const BinaryPath = "/opt/rigger/rigger"

// SnapshotsOnNodes says whether the etcd nodes run the
// etcd-rolling-snapshots container: rigger runs the cluster's etcd,
// services.etcd.snapshot is not false and backup_config.enabled is true
// (as spec.Load defaults it), as RKE runs it.
func SnapshotsOnNodes(c *spec.Cluster) bool {
	e := c.Services.Etcd
	if len(e.ExternalURLs) > 0 || e.Snapshot != nil && !*e.Snapshot {
		return false
	}
	return e.BackupConfig != nil && (e.BackupConfig.Enabled == nil || *e.BackupConfig.Enabled)
}

// RiggerImage is rigger's own image for the containers that run rigger
// on the nodes: rigger.image, or else system_images.cert_downloader when
// it is rigger's (its repository is named rigger, as the sandbox's
// rigger/rigger:dev), or "" when neither is: then rigger's binary runs in
// system_images.alpine. Any other cert_downloader (RKE's rke-tools, from
// a mirror of any path) has no rigger in it.
func RiggerImage(c *spec.Cluster) string {
	if c.Rigger.Image != "" {
		return c.Rigger.Image
	}
	if im := c.SystemImages.CertDownloader; im != "" && isRiggerImage(im) {
		return im
	}
	return ""
}

// unreadableBinary is Container.Binary when rigger's own binary cannot be
// read: the container's creation then fails with nodebin's reason.
const unreadableBinary = "unreadable"

// rollingSnapshots is the etcd-rolling-snapshots container: rigger
// runs `rigger etcd-snapshotter` with the node's Docker socket and
// /etc/kubernetes (read-only: its configuration and the kube-node
// certificate it reaches etcd with), restarted always, as RKE's. It runs
// in rigger's image (RiggerImage), or else, as RKE's does, in
// system_images.alpine (rke-tools, which every RKE node has), with the
// running rigger's own static binary copied in (nodebin). It is confined:
// as root, it owns the socket and the files it reads, and needs no
// capability (RKE's runs with Docker's default set).
func (b *builder) rollingSnapshots() Container {
	c := Container{
		Name:          EtcdRollingSnapshots,
		Image:         RiggerImage(b.c),
		Args:          []string{SnapshotterCommand, "--config=" + SnapshotterConfigFile},
		Binds:         []string{b.kubernetesBind() + ":ro", dockerSocket + ":" + dockerSocket},
		NetworkMode:   NetworkModeHost,
		RestartPolicy: RestartAlways,
		Confined:      true,
	}
	if c.Image == "" {
		c.Image = b.c.SystemImages.Alpine
		c.Entrypoint = []string{BinaryPath}
		c.Binary = unreadableBinary
		if bin, err := nodebin.Get(); err == nil {
			c.Binary = bin.ID
		}
	}
	return c
}

// snapshotterConfig is the content of SnapshotterConfigFile for node n.
func snapshotterConfig(c *spec.Cluster, r release, n *Node) ([]byte, error) {
	etcd, ok := n.Container(Etcd)
	if !ok {
		return nil, fmt.Errorf("node %s runs no etcd container", n.Address)
	}
	cfg := SnapshotterConfig{
		Cluster: c.ClusterName, KubernetesVersion: c.KubernetesVersion,
		Node: n.Address, Etcd: *etcd,
		HelperImage: c.SystemImages.Alpine,
		Backup:      c.Services.Etcd.BackupConfig,
	}
	cfg.Etcd.Labels = nil
	b := newBuilder(c, r)
	for i := range b.hosts {
		h := &b.hosts[i]
		cfg.Nodes = append(cfg.Nodes, Node{Address: h.address, InternalAddress: h.internal, Hostname: h.hostname, Roles: h.roles()})
	}
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("etcd-rolling-snapshots configuration: %w", err)
	}
	return append(out, '\n'), nil
}

// isRiggerImage says whether image is rigger's: its repository's last
// part is rigger (rigger/rigger, registry.example/mirror/rigger), from any
// registry, with any tag or digest.
func isRiggerImage(image string) bool {
	repo := image
	if i := strings.LastIndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return repo[strings.LastIndexByte(repo, '/')+1:] == "rigger"
}
