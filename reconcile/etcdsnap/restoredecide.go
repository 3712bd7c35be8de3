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
	// Zipped says, when the snapshot file is not there, that <name>.zip
	// is (RKE's zip file of it). Unzipped is set once it was unzipped
	// here (checked with HashChecked); Size and SHA256 are then the
	// unzipped snapshot's.
	Zipped   bool
	Unzipped *unzipped
	// HashChecked says etcd's integrity hash of the copy was checked
	// (only a source without a sidecar's is); HashErr is why it failed.
	HashChecked bool
	HashErr     error
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

	// Source is set for a snapshot without a sidecar (Sidecar nil): the
	// node whose copy every member restores (Fetch sends it to every
	// other node, to FetchDir: their own copies stay as they are), and
	// Size and SHA256 are that copy's.
	Source string
	Size   int64
	SHA256 string
	// CheckHash is set when etcd's integrity hash of that node's copy
	// must be checked first (nodeCopy.HashChecked); decide again with it.
	CheckHash string
	// Unzipped is set when the source's copy is its zip file: the
	// snapshot unzipped here, which Fetch sends to every node, the
	// source too.
	Unzipped *unzipped
}

// decideRestore decides from the copies found on the etcd nodes (in
// cluster.yml order) and in S3 (nil: not asked, or not configured when
// haveS3 is false) whether and how the snapshot can be restored. ca is the
// sha256 of the cluster's CA certificate; fromNode, when set, is the etcd
// node whose copy of a snapshot without a sidecar is restored
// (--from-node). It does no I/O.
func decideRestore(name string, copies []nodeCopy, s3 *s3Copy, haveS3 bool, ca, fromNode string) (*restoreDecision, error) {
	if fromNode != "" && !slices.ContainsFunc(copies, func(c nodeCopy) bool { return c.Node == fromNode }) {
		return nil, fmt.Errorf("--from-node %s is not an etcd node of cluster.yml (its etcd nodes: %s)", fromNode, strings.Join(copyNodes(copies, nil), ", "))
	}
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
	// A copy is the snapshot file, or RKE's zip of it.
	present := slices.ContainsFunc(copies, func(c nodeCopy) bool { return c.Present || c.Zipped })
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
		case !present:
			return nil, fmt.Errorf("snapshot %s is only in %s, without a sidecar (%s.json): rigger restores a snapshot it did not take only from an etcd node's copy; "+
				"download it to %s on an etcd node and run restore again", name, s3.Where, name, path.Join(Dir, name))
		default:
			return decideWithoutSidecar(name, copies, fromNode)
		}
	}
	if fromNode != "" {
		return nil, fmt.Errorf("--from-node is for a snapshot rigger did not take: %s has a sidecar (from %s), and every node's copy is checked against it; "+
			"run restore without --from-node", name, scFrom)
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
			// A zip file beside a sidecar is none of rigger's: the copy
			// is missing, and fetched beside it.
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

// decideWithoutSidecar decides the restore of a snapshot that has no
// sidecar anywhere (one RKE took, or a file put there by hand): nothing
// says which copy is right, and RKE's copies of one name differ from node to
// node (each is its own member's), so one copy is the source for every
// member: fromNode's, else the first node's in cluster.yml order that has
// one. It must pass etcd's integrity hash before anything else happens; it
// goes to every other node beside that node's own copy, never over it. A
// node's copy is its snapshot file, else its zip file (<name>.zip, RKE's):
// a zipped source is unzipped here and goes to every node, itself too.
func decideWithoutSidecar(name string, copies []nodeCopy, fromNode string) (*restoreDecision, error) {
	have := copyNodes(copies, func(c nodeCopy) bool { return c.Present || c.Zipped })
	src := fromNode
	if src == "" {
		src = have[0]
	} else if !slices.Contains(have, src) {
		return nil, fmt.Errorf("--from-node %s has no copy of %s (%s, nor %s%s); the etcd nodes with one: %s", src, name, path.Join(Dir, name), name, zipSuffix, strings.Join(have, ", "))
	}
	c := copies[slices.IndexFunc(copies, func(c nodeCopy) bool { return c.Node == src })]
	file := path.Join(Dir, name)
	if !c.Present {
		file += zipSuffix
	}
	switch {
	case !c.HashChecked:
		return &restoreDecision{CheckHash: src}, nil
	case c.HashErr != nil:
		others := slices.DeleteFunc(slices.Clone(have), func(n string) bool { return n == src })
		hint := "no other etcd node has a copy: restore another snapshot"
		if len(others) > 0 {
			hint = "restore another node's copy with --from-node (the etcd nodes with one: " + strings.Join(others, ", ") + ")"
		}
		return nil, fmt.Errorf("node %s: %s is damaged: %w; %s", src, file, c.HashErr, hint)
	}
	d := &restoreDecision{Source: src, Size: c.Size, SHA256: c.SHA256, Verified: []string{src}, Fetch: map[string]string{}}
	if !c.Present {
		d.Unzipped, d.Verified = c.Unzipped, nil
	}
	for _, o := range copies {
		if o.Node != src || !c.Present {
			d.Fetch[o.Node] = src
		}
	}
	return d, nil
}

// copyNodes are the nodes of the copies that keep says (all with nil).
func copyNodes(copies []nodeCopy, keep func(nodeCopy) bool) []string {
	var out []string
	for _, c := range copies {
		if keep == nil || keep(c) {
			out = append(out, c.Node)
		}
	}
	return out
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
	if v, ok := etcdImageVersion(image); ok && atLeast(v, 3, 6, 0) {
		return "etcdutl"
	}
	return "etcdctl"
}

// etcdImageVersion is the etcd version an image's tag names
// (v3.5.16-rancher1: 3.5.16), false when it names none.
func etcdImageVersion(image string) ([3]int, bool) {
	i := strings.LastIndexAny(image, ":/")
	if i < 0 || image[i] != ':' {
		return [3]int{}, false
	}
	tag, _, _ := strings.Cut(strings.TrimPrefix(image[i+1:], "v"), "-")
	var v [3]int
	if n, _ := fmt.Sscanf(tag, "%d.%d.%d", &v[0], &v[1], &v[2]); n < 2 {
		return [3]int{}, false
	}
	return v, true
}

// restoreBump is how far a restore moves etcd's revision past the
// snapshot's, marking the revisions before as compacted (etcd's
// --bump-revision and --mark-compacted, what Kubernetes' documentation
// asks of a restore): the revision never goes back, so every watcher the
// API servers had (the kubelets', the controllers') is told its revision
// is compacted and lists again, instead of waiting on a revision the
// restored data reaches only later, or never, as a kubelet that keeps a
// pod deleted after the snapshot running, or one that never ends a pod
// deleted after the restore. A billion revisions is far more than a
// cluster writes between a snapshot and its restore.
const restoreBump = "1000000000"

// bumpsRevision reports whether the etcd image's restore has
// --bump-revision: etcd 3.5.10 and later (and a tag that is no version:
// the newest).
func bumpsRevision(image string) bool {
	v, ok := etcdImageVersion(image)
	return !ok || atLeast(v, 3, 5, 10)
}

// atLeast reports whether version v is major.minor.patch or later.
func atLeast(v [3]int, major, minor, patch int) bool {
	return slices.Compare(v[:], []int{major, minor, patch}) >= 0
}

// restoreCommand is the command of the etcd image that restores file as
// member m of members into dataDir (a path in the container, which must
// not exist), with the revision bumped where the image can.
func restoreCommand(image, file string, m RestoreMember, members []RestoreMember, dataDir string) []string {
	cmd := []string{offlineTool(image), "snapshot", "restore", file,
		"--name", m.Name,
		"--initial-cluster", initialCluster(members),
		"--initial-cluster-token", desired.EtcdClusterToken,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--data-dir", dataDir,
	}
	if bumpsRevision(image) {
		cmd = append(cmd, "--bump-revision", restoreBump, "--mark-compacted")
	}
	return cmd
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
