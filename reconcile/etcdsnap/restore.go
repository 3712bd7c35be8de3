package etcdsnap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/errdefs"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
)

// RestoreOptions are the choices of one Restore.
type RestoreOptions struct {
	// Phase, when set, is called when a part of the restore starts, with
	// its title.
	Phase func(title string)
	// Progress, when set, receives a line per thing done on a node. It is
	// called from one goroutine at a time.
	Progress func(node, msg string)
	// Checked, when set, is called once the check has passed and before
	// anything is stopped; an error from it ends the restore with nothing
	// changed (the CLI asks for confirmation there).
	Checked func(*RestoreCheck) error
	// Hooks receive the progress of the apply that brings etcd and the
	// control plane back.
	Hooks plan.Hooks
}

// RestoreCheck is what the check before a restore found: the snapshot,
// verified on every etcd node.
type RestoreCheck struct {
	Sidecar *Sidecar
	// Verified are the etcd nodes whose copy had the sidecar's size and
	// sha256; Fetched those it was copied to (from FetchedFrom), verified.
	Verified []string
	Fetched  []string
	// FetchedFrom is node → where its copy came from (a node or S3).
	FetchedFrom map[string]string
	// Members are the etcd members the snapshot is restored as, in
	// cluster.yml order.
	Members []RestoreMember
	// ControlPlane are the nodes whose kube-apiserver is stopped.
	ControlPlane []string
}

// RestoreMember is one etcd member of the restored cluster.
type RestoreMember struct {
	Node    string
	Name    string
	PeerURL string
}

// RestoreResult is what Restore did.
type RestoreResult struct {
	Check *RestoreCheck
	// MovedAside is node → the data directory the node's etcd had before,
	// kept on the node (absent: the node had none).
	MovedAside map[string]string
	// Restored are the etcd nodes whose data directory holds the snapshot.
	Restored []string
	// AddonsErr says why the add-ons were not ready after the apply that
	// recreated etcd and the control plane (Cluster.Reapply); nil when
	// they were, or it did not run.
	AddonsErr error
}

// restoreDirName is the directory, under the etcd data bind, that etcdctl
// restores into before the member's data is put in place.
const restoreDirName = "rigger-restore"

// asideInfix names a data directory moved aside: member.before-restore-<time>.
const asideInfix = ".before-restore-"

// Restore restores the snapshot name on every etcd node of
// cluster.yml and brings the cluster back on it.
//
// It checks first and changes nothing until the check has passed: every
// etcd node answers and holds the snapshot with the sidecar's size and
// sha256 (a missing copy is fetched from a node with a verified one, or
// from S3, and verified), the sidecar's CA fingerprint is the cluster's,
// and `etcdctl snapshot status` agrees with the sidecar on every node.
// A copy present but different from its sidecar is refused, not replaced.
//
// Then it stops and removes kube-apiserver on every controlplane node and
// etcd on every etcd node, moves each etcd data directory aside
// (member → member.before-restore-<time>, kept), restores the snapshot on
// every member with etcdctl from the etcd image, runs the normal apply
// (cl.Reapply: it creates every etcd member at once, as a new cluster, and
// the API servers), and checks that etcd and the API servers are healthy
// and that the members (cl.Members) are exactly those restored.
//
// A failure after the first container stopped is a *RestoreError that
// says what was done and how to go on.
func Restore(ctx context.Context, cl *Cluster, name string, o RestoreOptions) (*RestoreResult, error) {
	progress := serialized(o.Progress)
	phase := func(title string) {
		if o.Phase != nil {
			o.Phase(title)
		}
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	if cl.External {
		return nil, errors.New("restore a snapshot: services.etcd.external_urls is set: rigger does not run this cluster's etcd")
	}
	if cl.Reapply == nil || cl.Members == nil {
		return nil, errors.New("restore a snapshot: the cluster cannot be applied again from here (no Reapply or Members)")
	}
	members, err := cl.members("restore a snapshot")
	if err != nil {
		return nil, err
	}

	phase("Check snapshot " + name + " (nothing is changed)")
	chk, err := cl.checkRestore(ctx, name, members, progress)
	if err != nil {
		return nil, fmt.Errorf("restore snapshot %s refused, nothing was stopped: %w", name, err)
	}
	res := &RestoreResult{Check: chk, MovedAside: map[string]string{}}
	if o.Checked != nil {
		if err := o.Checked(chk); err != nil {
			return res, err
		}
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	r := &restorer{cl: cl, name: name, chk: chk, members: members, progress: progress, res: res,
		stamp: cl.Now().UTC().Format("20060102T150405Z")}
	return res, r.run(ctx, phase, o.Hooks)
}

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

// checkRestore is the check before a restore: it changes nothing on the
// cluster (it may copy a missing snapshot to a node's snapshot directory).
func (cl *Cluster) checkRestore(ctx context.Context, name string, members []etcdNode, progress func(node, msg string)) (*RestoreCheck, error) {
	for _, m := range members {
		if _, _, err := etcdDataBind(m.etcd); err != nil {
			return nil, fmt.Errorf("node %s: %w", m.node.Address, err)
		}
	}
	copies := make([]nodeCopy, len(members))
	_ = fanout.Each(ctx, members, cl.MaxParallel, func(ctx context.Context, i int, m etcdNode) error {
		copies[i] = cl.findCopy(ctx, m.node.Address, name)
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	caSum := sha256.Sum256(cl.PKI.Certs[pki.CACertName].CertPEM)
	ca := hex.EncodeToString(caSum[:])
	cfg := cl.s3Config()
	dec, err := decideRestore(name, copies, nil, cfg != nil, ca)
	var store *S3
	if err == nil && dec.NeedS3 {
		s3c := &s3Copy{}
		store, s3c.Err = NewS3(cfg)
		if s3c.Err == nil {
			s3c.Where = store.Where(name)
			s3c.Present, s3c.Size, s3c.Sidecar, s3c.Err = cl.findS3Copy(ctx, store, name)
		}
		dec, err = decideRestore(name, copies, s3c, true, ca)
	}
	if err != nil {
		return nil, err
	}
	sc := dec.Sidecar
	for _, n := range dec.Verified {
		progress(n, fmt.Sprintf("%s present, %d bytes, sha256 %s verified", name, sc.Size, sc.SHA256))
	}

	chk := &RestoreCheck{Sidecar: sc, Verified: dec.Verified, FetchedFrom: map[string]string{}, Members: restoreMembers(members)}
	for _, n := range cl.Desired.Nodes {
		if _, ok := n.Container(desired.KubeAPIServer); ok {
			chk.ControlPlane = append(chk.ControlPlane, n.Address)
		}
	}
	// The controlplane nodes must answer too: their API servers stop.
	for _, a := range chk.ControlPlane {
		if _, err := cl.Engine(ctx, a); err != nil {
			return nil, fmt.Errorf("a restore stops the API server of every controlplane node: node %s: %w", a, err)
		}
	}

	// Fetch the missing copies, verified where they land.
	side, err := sc.Marshal()
	if err != nil {
		return nil, err
	}
	var fetchErrs []error
	for _, m := range members {
		src, ok := dec.Fetch[m.node.Address]
		if !ok {
			continue
		}
		to, where := m.node.Address, "node "+src
		if src == fromS3 {
			where = store.Where(name)
			err = cl.fetchFromS3(ctx, store, to, sc, side)
		} else {
			err = cl.copySnapshot(ctx, src, to, sc, side)
		}
		if err != nil {
			fetchErrs = append(fetchErrs, fmt.Errorf("node %s: fetch %s from %s: %w", to, name, where, err))
			continue
		}
		chk.Fetched = append(chk.Fetched, to)
		chk.FetchedFrom[to] = where
		progress(to, fmt.Sprintf("%s was missing: copied from %s, sha256 verified", name, where))
	}
	if err := errors.Join(fetchErrs...); err != nil {
		return nil, err
	}

	// etcdctl must read it, and agree with the sidecar, on every node.
	if err := fanout.Each(ctx, members, cl.MaxParallel, func(ctx context.Context, _ int, m etcdNode) error {
		st, err := cl.snapshotStatus(ctx, m, name)
		if err == nil && (st.Hash != sc.Hash || st.Revision != sc.Revision || st.TotalKeys != sc.TotalKeys) {
			err = fmt.Errorf("snapshot status says hash %d, revision %d, %d keys; the sidecar hash %d, revision %d, %d keys",
				st.Hash, st.Revision, st.TotalKeys, sc.Hash, sc.Revision, sc.TotalKeys)
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", m.node.Address, err)
		}
		progress(m.node.Address, fmt.Sprintf("snapshot status: revision %d, %d keys, hash %d", st.Revision, st.TotalKeys, st.Hash))
		return nil
	}); err != nil {
		return nil, err
	}
	return chk, nil
}

// findCopy stats the snapshot on a node, computes its sha256 there and
// reads its sidecar.
func (cl *Cluster) findCopy(ctx context.Context, node, name string) nodeCopy {
	c := nodeCopy{Node: node}
	e, err := cl.Engine(ctx, node)
	if err != nil {
		c.Err = err
		return c
	}
	file := path.Join(Dir, name)
	fi, err := dockerop.StatFile(ctx, e, node, cl.HelperImage, file)
	switch {
	case err == nil:
		c.Present, c.Size = true, fi.Size
		if c.SHA256, err = cl.sha256On(ctx, e, node, file); err != nil {
			c.Err = err
			return c
		}
	case !errors.Is(err, fs.ErrNotExist):
		c.Err = err
		return c
	}
	files, err := dockerop.ReadFiles(ctx, e, node, cl.HelperImage, []string{file + SidecarSuffix})
	if err != nil {
		c.Err = err
		return c
	}
	if b, ok := files[file+SidecarSuffix]; ok {
		c.Sidecar, c.SidecarErr = ParseSidecar(b)
	}
	return c
}

// findS3Copy looks for the snapshot and its sidecar in S3.
func (cl *Cluster) findS3Copy(ctx context.Context, store *S3, name string) (present bool, size int64, sc *Sidecar, err error) {
	objs, err := store.List(ctx)
	if err != nil {
		return false, 0, nil, err
	}
	for _, o := range objs {
		if o.Name == name {
			if o.SidecarErr != nil {
				return true, o.Size, nil, fmt.Errorf("the sidecar of %s in s3: %w", name, o.SidecarErr)
			}
			return true, o.Size, o.Sidecar, nil
		}
	}
	return false, 0, nil, nil
}

// fetchFromS3 streams the snapshot from S3 to the node (placeSnapshot).
func (cl *Cluster) fetchFromS3(ctx context.Context, store *S3, to string, sc *Sidecar, side []byte) error {
	rc, size, err := store.Open(ctx, sc.Name)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size != sc.Size {
		return fmt.Errorf("the snapshot in s3 is %d bytes, its sidecar says %d", size, sc.Size)
	}
	return cl.placeSnapshot(ctx, to, sc, side, rc, size)
}

// snapshotStatus runs `etcdctl snapshot status` on the member's copy.
func (cl *Cluster) snapshotStatus(ctx context.Context, m etcdNode, name string) (Status, error) {
	e, err := cl.Engine(ctx, m.node.Address)
	if err != nil {
		return Status{}, err
	}
	out, err := dockerop.RunOutput(ctx, e, m.node.Address, m.etcd.Image,
		[]string{offlineTool(m.etcd.Image), "snapshot", "status", path.Join(Dir, name), "-w", "json"},
		dockerop.RunOptions{Binds: []string{Dir + ":" + Dir + ":ro"}, Env: []string{"ETCDCTL_API=3"}})
	if err != nil {
		return Status{}, err
	}
	return ParseStatus(out)
}

// restorer is the destructive part of one restore.
type restorer struct {
	cl       *Cluster
	name     string
	stamp    string
	chk      *RestoreCheck
	members  []etcdNode
	progress func(node, msg string)

	mu  sync.Mutex
	res *RestoreResult
	// stopped are the containers stopped and removed, "node component".
	stopped []string
}

func (r *restorer) run(ctx context.Context, phase func(string), hooks plan.Hooks) error {
	fail := func(step string, err error) error {
		return r.failure(step, err)
	}
	phase("Stop kube-apiserver on every controlplane node")
	if err := fanout.Each(ctx, r.chk.ControlPlane, r.cl.MaxParallel, func(ctx context.Context, _ int, node string) error {
		return r.stop(ctx, node, desired.KubeAPIServer)
	}); err != nil {
		return fail("stop kube-apiserver", err)
	}
	phase("Stop etcd on every etcd node")
	if err := r.eachMember(ctx, func(ctx context.Context, m etcdNode) error {
		return r.stop(ctx, m.node.Address, desired.Etcd)
	}); err != nil {
		return fail("stop etcd", err)
	}
	phase("Move the etcd data directories aside")
	if err := r.eachMember(ctx, r.moveAside); err != nil {
		return fail("move the etcd data directories aside", err)
	}
	phase("Restore " + r.name + " on every etcd member")
	if err := r.eachMember(ctx, r.restore); err != nil {
		return fail("restore the snapshot", err)
	}
	phase("Apply: etcd and the control plane back")
	addonsErr, err := r.cl.Reapply(ctx, hooks)
	r.res.AddonsErr = addonsErr
	if err != nil {
		return fail("apply", err)
	}
	phase("Verify")
	if err := r.verify(ctx); err != nil {
		return fail("verify", err)
	}
	return nil
}

// eachMember runs f for every etcd node, MaxParallel at once, and joins
// the errors.
func (r *restorer) eachMember(ctx context.Context, f func(ctx context.Context, m etcdNode) error) error {
	return fanout.Each(ctx, r.members, r.cl.MaxParallel, func(ctx context.Context, _ int, m etcdNode) error { return f(ctx, m) })
}

func (r *restorer) stop(ctx context.Context, node, component string) error {
	e, err := r.cl.Engine(ctx, node)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	if _, err := e.ContainerInspect(ctx, component); errdefs.IsNotFound(err) {
		r.progress(node, component+" was not there")
		return nil
	}
	if err := dockerop.Remove(ctx, e, node, component); err != nil {
		return err
	}
	r.mu.Lock()
	r.stopped = append(r.stopped, node+" "+component)
	r.mu.Unlock()
	r.progress(node, component+" stopped and removed")
	return nil
}

// moveAside renames the member's data directory member to
// member.before-restore-<time>, and removes what an earlier restore that
// stopped half-way left in the restore directory.
func (r *restorer) moveAside(ctx context.Context, m etcdNode) error {
	node := m.node.Address
	host, _, _ := etcdDataBind(m.etcd)
	e, err := r.cl.Engine(ctx, node)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	member := path.Join(host, "member")
	aside := member + asideInfix + r.stamp
	script := fmt.Sprintf(`set -e
rm -rf %[1]s
if [ -e %[2]s ]; then
  [ ! -e %[3]s ] || { echo "%[3]s exists already" >&2; exit 1; }
  mv %[2]s %[3]s
  echo moved
fi`, path.Join(host, restoreDirName), member, aside)
	out, err := dockerop.RunOutput(ctx, e, node, r.cl.HelperImage, []string{"sh", "-c", script},
		dockerop.RunOptions{Binds: []string{host + ":" + host}})
	if err != nil {
		return fmt.Errorf("move %s aside: %w", member, err)
	}
	if strings.TrimSpace(string(out)) == "moved" {
		r.mu.Lock()
		r.res.MovedAside[node] = aside
		r.mu.Unlock()
		r.progress(node, fmt.Sprintf("%s moved to %s (kept)", member, aside))
	} else {
		r.progress(node, member+" was not there: nothing to move aside")
	}
	return nil
}

// restore restores the snapshot as the node's member into the restore
// directory with etcdctl from the etcd image, then puts it in place.
func (r *restorer) restore(ctx context.Context, m etcdNode) error {
	node := m.node.Address
	host, inContainer, _ := etcdDataBind(m.etcd)
	e, err := r.cl.Engine(ctx, node)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	var me RestoreMember
	for _, rm := range r.chk.Members {
		if rm.Node == node {
			me = rm
		}
	}
	cmd := restoreCommand(m.etcd.Image, path.Join(Dir, r.name), me, r.chk.Members, path.Join(inContainer, restoreDirName))
	if _, err := dockerop.RunOutput(ctx, e, node, m.etcd.Image, cmd, dockerop.RunOptions{
		Binds: []string{host + ":" + inContainer, Dir + ":" + Dir + ":ro"},
		Env:   []string{"ETCDCTL_API=3"},
	}); err != nil {
		return fmt.Errorf("%s snapshot restore: %w", cmd[0], err)
	}
	member := path.Join(host, "member")
	tmp := path.Join(host, restoreDirName)
	script := fmt.Sprintf(`set -e
[ ! -e %[2]s ] || { echo "%[2]s exists: not replaced" >&2; exit 1; }
mv %[1]s/member %[2]s
rmdir %[1]s`, tmp, member)
	if u := m.etcd.User; u != "" {
		script += "\nchown -R " + u + " " + member
	}
	if err := dockerop.Run(ctx, e, node, r.cl.HelperImage, []string{"sh", "-c", script}, []string{host + ":" + host}); err != nil {
		return fmt.Errorf("put the restored data in place: %w", err)
	}
	r.mu.Lock()
	r.res.Restored = append(r.res.Restored, node)
	r.mu.Unlock()
	r.progress(node, fmt.Sprintf("restored as member %s (%s)", me.Name, me.PeerURL))
	return nil
}

// verify checks that every etcd member is healthy and a voter of one
// cluster of exactly the restored members, and that every API server is
// healthy.
func (r *restorer) verify(ctx context.Context) error {
	chk, err := r.cl.checker()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range r.members {
		t := health.Target{Node: m.node.Address, InternalAddress: m.node.InternalAddress, Component: desired.Etcd}
		if err := chk.Wait(ctx, t, restoreHealthTimeout); err != nil {
			errs = append(errs, fmt.Errorf("node %s: etcd: %w", t.Node, err))
			continue
		}
		r.progress(t.Node, "etcd healthy")
	}
	if len(errs) == 0 {
		got, err := r.cl.Members(ctx)
		if err == nil {
			err = sameMembers(got, r.chk.Members)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("etcd members: %w", err))
		} else {
			r.progress(r.members[0].node.Address, fmt.Sprintf("etcd has the %d members restored, all voters", len(got)))
		}
	}
	for _, a := range r.chk.ControlPlane {
		t := health.Target{Node: a, Component: desired.KubeAPIServer}
		if n, ok := r.cl.Desired.Node(a); ok {
			t.InternalAddress = n.InternalAddress
		}
		if err := chk.Wait(ctx, t, restoreHealthTimeout); err != nil {
			errs = append(errs, fmt.Errorf("node %s: kube-apiserver: %w", a, err))
			continue
		}
		r.progress(a, "kube-apiserver healthy")
	}
	return errors.Join(errs...)
}

// restoreHealthTimeout bounds the wait for one component in the closing
// check (the apply waited already).
const restoreHealthTimeout = 2 * time.Minute

// sameMembers checks that the etcd cluster has exactly the restored
// members, all voting.
func sameMembers(got []etcdmember.Member, want []RestoreMember) error {
	var problems []string
	for _, w := range want {
		i := slices.IndexFunc(got, func(m etcdmember.Member) bool { return m.Name == w.Name && slices.Contains(m.PeerURLs, w.PeerURL) })
		switch {
		case i < 0:
			problems = append(problems, "member "+w.Name+" ("+w.PeerURL+") is missing")
		case got[i].IsLearner:
			problems = append(problems, "member "+w.Name+" is a learner")
		}
	}
	if len(got) != len(want) {
		problems = append(problems, fmt.Sprintf("%d members, want %d", len(got), len(want)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// failure is the *RestoreError of a step that failed after the first
// container stopped.
func (r *restorer) failure(step string, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	re := &RestoreError{Name: r.name, Step: step, Err: err, Stopped: slices.Clone(r.stopped),
		MovedAside: map[string]string{}, Restored: slices.Clone(r.res.Restored), HelperImage: r.cl.HelperImage}
	for k, v := range r.res.MovedAside {
		re.MovedAside[k] = v
	}
	for _, m := range r.members {
		re.EtcdNodes = append(re.EtcdNodes, m.node.Address)
	}
	slices.Sort(re.Stopped)
	slices.Sort(re.Restored)
	return re
}

// RestoreError is a restore that failed after it began to stop
// containers: what it did, and how to go on.
type RestoreError struct {
	Name string
	// Step is what failed; Err why.
	Step string
	Err  error
	// Stopped are the containers stopped and removed, "node component".
	Stopped []string
	// MovedAside is node → where its etcd data directory was moved.
	MovedAside map[string]string
	// Restored are the etcd nodes whose data directory holds the snapshot.
	Restored []string
	// EtcdNodes are all etcd nodes, in cluster.yml order.
	EtcdNodes   []string
	HelperImage string
}

func (e *RestoreError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "restore snapshot %s: %s: %v\n", e.Name, e.Step, e.Err)
	b.WriteString("State of the cluster now:\n")
	if len(e.Stopped) > 0 {
		fmt.Fprintf(&b, "  stopped and removed: %s\n", strings.Join(e.Stopped, ", "))
	}
	for _, n := range e.EtcdNodes {
		state := "not restored"
		if slices.Contains(e.Restored, n) {
			state = "restored from " + e.Name
		}
		if a, ok := e.MovedAside[n]; ok {
			state += "; its old data is in " + a
		} else {
			state += "; its data directory was not moved"
		}
		fmt.Fprintf(&b, "  %s: %s\n", n, state)
	}
	b.WriteString("To go on, either:\n")
	fmt.Fprintf(&b, "  - run `rigger snapshot restore %s -f cluster.yml` again once the cause is fixed (the old data stays where it is), or\n", e.Name)
	if len(e.MovedAside) == 0 {
		b.WriteString("  - run `rigger apply -f cluster.yml`: nothing was moved, etcd and the API servers start again on their data.")
		return b.String()
	}
	b.WriteString("  - put the old data back on each node below (as root, with Docker), then run `rigger apply -f cluster.yml`:\n")
	for _, n := range e.EtcdNodes {
		a, ok := e.MovedAside[n]
		if !ok {
			continue
		}
		dir := path.Dir(a)
		fmt.Fprintf(&b, "      %s: docker rm -f etcd; docker run --rm -v %s:%s %s sh -c 'rm -rf %s && mv %s %s'\n",
			n, dir, dir, e.HelperImage, path.Join(dir, "member"), a, path.Join(dir, "member"))
	}
	return strings.TrimRight(b.String(), "\n")
}

func (e *RestoreError) Unwrap() error { return e.Err }
