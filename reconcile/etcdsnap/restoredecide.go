package etcdsnap

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
)

// nodeCopy is what the check found of the snapshot on one etcd node.
type nodeCopy struct {
	Node string
	// Err: the node could not be checked (unreachable, Docker error).
	Err error
	// Present says whether the snapshot file is there; Size and SHA256
	// are its size and checksum, computed on the node.
	Present bool
	Size    int64
	SHA256  string
	// Sidecar is the node's sidecar of the snapshot, nil when none;
	// SidecarErr when it could not be read.
	Sidecar    *Sidecar
	SidecarErr error
}

// s3Copy is what S3 holds of the snapshot, when it was asked.
type s3Copy struct {
	Where   string
	Present bool
	Size    int64
	Sidecar *Sidecar
	// Err: S3 could not be asked.
	Err error
}

// fromS3 is the source of a copy fetched from S3.
const fromS3 = "s3"

// restoreDecision is what the check decided from what it found.
type restoreDecision struct {
	Sidecar  *Sidecar
	Verified []string
	// Fetch is node → source: a node address with a verified copy, or
	// fromS3.
	Fetch map[string]string
	// NeedS3 is set when S3 was not asked and could help (a sidecar or a
	// copy missing from every node); decide again with it.
	NeedS3 bool
}

// decideRestore decides from the copies found on the etcd nodes (in
// cluster.yml order) and in S3 (nil: not asked, or not configured when
// haveS3 is false) whether and how the snapshot can be restored. ca is the
// sha256 of the cluster's CA certificate. It does no I/O.
func decideRestore(name string, copies []nodeCopy, s3 *s3Copy, haveS3 bool, ca string) (*restoreDecision, error) {
	var errs []error
	for _, c := range copies {
		if c.Err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", c.Node, c.Err))
		} else if c.SidecarErr != nil {
			errs = append(errs, fmt.Errorf("node %s: the sidecar of %s: %w", c.Node, name, c.SidecarErr))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("a restore needs every etcd node to answer: %w", errors.Join(errs...))
	}
	// The sidecar: every node's must agree.
	var sc *Sidecar
	var scFrom string
	for _, c := range copies {
		if c.Sidecar == nil {
			continue
		}
		if sc == nil {
			sc, scFrom = c.Sidecar, "node "+c.Node
			continue
		}
		if c.Sidecar.SHA256 != sc.SHA256 || c.Sidecar.Size != sc.Size || c.Sidecar.PKIFingerprint != sc.PKIFingerprint {
			return nil, fmt.Errorf("the sidecars of %s on node %s and %s differ (size %d/%d, sha256 %s/%s): "+
				"two different snapshots have this name; delete the wrong one, or restore another snapshot",
				name, c.Node, scFrom, c.Sidecar.Size, sc.Size, c.Sidecar.SHA256, sc.SHA256)
		}
	}
	present := slices.ContainsFunc(copies, func(c nodeCopy) bool { return c.Present })
	if sc == nil {
		switch {
		case s3 == nil && haveS3:
			return &restoreDecision{NeedS3: true}, nil
		case s3 != nil && s3.Err != nil:
			return nil, fmt.Errorf("the sidecar of %s is on no etcd node, and s3 could not be asked: %w", name, s3.Err)
		case s3 != nil && s3.Sidecar != nil:
			sc, scFrom = s3.Sidecar, s3.Where
		case !present && (s3 == nil || !s3.Present):
			where := "on the etcd nodes"
			if haveS3 {
				where += " or in s3"
			}
			return nil, fmt.Errorf("no snapshot named %s %s (rigger snapshot list shows them)", name, where)
		default:
			return nil, fmt.Errorf("snapshot %s has no sidecar (%s.json): rigger restores only snapshots whose size and sha256 it knows, "+
				"those rigger snapshot save took", name, name)
		}
	}
	if sc.Name != name {
		return nil, fmt.Errorf("the sidecar from %s names snapshot %s, not %s", scFrom, sc.Name, name)
	}
	if sc.PKIFingerprint != ca {
		return nil, fmt.Errorf("snapshot %s was taken in a cluster whose CA certificate has sha256 %s, and this cluster's CA has sha256 %s: "+
			"its data (service account tokens, the API server's objects) belong to that CA; restore it with that cluster's state directory (--state-dir), "+
			"or restore a snapshot of this cluster", name, sc.PKIFingerprint, ca)
	}
	d := &restoreDecision{Sidecar: sc, Fetch: map[string]string{}}
	var missing []string
	for _, c := range copies {
		switch {
		case !c.Present:
			missing = append(missing, c.Node)
		case c.Size == sc.Size && c.SHA256 == sc.SHA256:
			d.Verified = append(d.Verified, c.Node)
		default:
			errs = append(errs, fmt.Errorf("node %s: the copy of %s is %d bytes with sha256 %s, its sidecar says %d bytes, sha256 %s: it is damaged; "+
				"remove %s on that node (then rigger copies a verified one there) or restore another snapshot",
				c.Node, name, c.Size, c.SHA256, sc.Size, sc.SHA256, path.Join(Dir, name)))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(missing) == 0 {
		return d, nil
	}
	src := ""
	switch {
	case len(d.Verified) > 0:
		src = d.Verified[0]
	case s3 == nil && haveS3:
		return &restoreDecision{NeedS3: true}, nil
	case s3 != nil && s3.Err != nil:
		return nil, fmt.Errorf("snapshot %s is on no etcd node and s3 could not be asked: %w", name, s3.Err)
	case s3 != nil && s3.Present && s3.Size == sc.Size:
		src = fromS3
	case s3 != nil && s3.Present:
		return nil, fmt.Errorf("snapshot %s is on no etcd node, and its copy in %s is %d bytes, its sidecar says %d: it is damaged", name, s3.Where, s3.Size, sc.Size)
	default:
		return nil, fmt.Errorf("no copy of snapshot %s on any etcd node, nor in s3: only its sidecar is left", name)
	}
	for _, n := range missing {
		d.Fetch[n] = src
	}
	return d, nil
}

// restoreMembers are the members of the restored etcd cluster: every etcd
// node of cluster.yml with its member name and peer URL, as the etcd
// containers run them.
func restoreMembers(members []etcdNode) []RestoreMember {
	out := make([]RestoreMember, 0, len(members))
	for _, m := range members {
		out = append(out, RestoreMember{Node: m.node.Address, Name: desired.EtcdMemberName(m.node.Hostname), PeerURL: desired.EtcdPeerURL(m.node.InternalAddress)})
	}
	return out
}

// initialCluster is etcd's --initial-cluster of the members: name=peer,….
func initialCluster(members []RestoreMember) string {
	parts := make([]string, len(members))
	for i, m := range members {
		parts[i] = m.Name + "=" + m.PeerURL
	}
	return strings.Join(parts, ",")
}

// offlineTool is the program of an etcd image that reads snapshot files:
// etcdctl, or etcdutl from etcd 3.6 on (whose etcdctl no longer has
// `snapshot restore` and `snapshot status`). A tag that is no version
// gives etcdctl.
func offlineTool(image string) string {
	tag := image
	if i := strings.LastIndexAny(image, ":/"); i >= 0 && image[i] == ':' {
		tag = image[i+1:]
	} else {
		return "etcdctl"
	}
	tag, _, _ = strings.Cut(strings.TrimPrefix(tag, "v"), "-")
	var major, minor int
	if n, _ := fmt.Sscanf(tag, "%d.%d", &major, &minor); n == 2 && (major > 3 || major == 3 && minor >= 6) {
		return "etcdutl"
	}
	return "etcdctl"
}

// restoreCommand is the command of the etcd image that restores file as
// member m of members into dataDir (a path in the container, which must
// not exist).
func restoreCommand(image, file string, m RestoreMember, members []RestoreMember, dataDir string) []string {
	return []string{offlineTool(image), "snapshot", "restore", file,
		"--name", m.Name,
		"--initial-cluster", initialCluster(members),
		"--initial-cluster-token", desired.EtcdClusterToken,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--data-dir", dataDir,
	}
}

// etcdDataBind is the etcd container's bind of its data directory: the
// node's directory and where the container sees it.
func etcdDataBind(c *desired.Container) (host, inContainer string, err error) {
	want := path.Clean(desired.EtcdDataDir)
	for _, b := range c.Binds {
		parts := strings.Split(b, ":")
		if len(parts) >= 2 && path.Clean(parts[1]) == want {
			return path.Clean(parts[0]), want, nil
		}
	}
	return "", "", fmt.Errorf("the etcd container binds no node directory at %s", desired.EtcdDataDir)
}
