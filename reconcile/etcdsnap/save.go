package etcdsnap

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// SaveOptions are the choices of one Save.
type SaveOptions struct {
	// Name of the snapshot; empty: Name of its kind and time, with
	// backup_config.safe_timestamp.
	Name string
	// Kind is KindManual (the default) or KindScheduled.
	Kind string
	// Progress, when set, receives a line per thing done on a node. It is
	// called from one goroutine at a time.
	Progress func(node, msg string)
}

// SaveResult is what Save did.
type SaveResult struct {
	// Sidecar describes the snapshot taken; nil when none was.
	Sidecar *Sidecar
	// Copies are the etcd nodes, in cluster.yml order, with whether the
	// snapshot is there and verified (Err nil).
	Copies []Copy
	// S3 is where the snapshot was uploaded, "" when it was not (no
	// s3backupconfig, or the upload failed: S3Err).
	S3    string
	S3Err error
}

// Copy is the snapshot on one etcd node.
type Copy struct {
	Node string
	// Err says why the snapshot is not on the node, verified.
	Err error
}

// snapshotBinds are the binds of the etcdctl containers: the certificates
// read-only, the snapshot directory.
var snapshotBinds = []string{desired.KubernetesDir + ":" + desired.KubernetesDir + ":ro", Dir + ":" + Dir}

// etcdctlEnv is the ETCDCTL_* environment of the etcd container: etcdctl
// then speaks to that member with its certificate. It holds file paths,
// no secrets.
func etcdctlEnv(c *desired.Container) []string {
	var env []string
	for _, e := range c.Env {
		if strings.HasPrefix(e, "ETCDCTL_") {
			env = append(env, e)
		}
	}
	return env
}

// Save takes a snapshot of etcd on one healthy member, verifies it
// (etcdctl snapshot status, size, sha256), stores it with its sidecar under
// Dir on that node, copies it to every other etcd node (verifying
// the checksum there), and uploads it to S3 when s3backupconfig is set.
//
// The error is nil only when all of that succeeded. A snapshot that was
// taken is never removed for a failed copy or upload: the result then says
// where it is, and the error what failed (a *UploadError for S3).
func Save(ctx context.Context, cl *Cluster, o SaveOptions) (*SaveResult, error) {
	progress := serialized(o.Progress)
	kind := o.Kind
	if kind == "" {
		kind = KindManual
	}
	if o.Name != "" {
		if err := CheckName(o.Name); err != nil {
			return nil, err
		}
	}
	members, err := cl.members("take a snapshot")
	if err != nil {
		return nil, err
	}
	src, err := cl.healthyMember(ctx, members)
	if err != nil {
		return nil, err
	}
	now := cl.Now().UTC().Truncate(time.Second)
	name := o.Name
	if name == "" {
		name = Name(kind, now, cl.Backup != nil && cl.Backup.SafeTimestamp)
	}
	if err := cl.refuseExisting(ctx, members, name); err != nil {
		return nil, err
	}

	timeout := cl.backupTimeout()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sc, err := cl.takeSnapshot(tctx, src, name, kind, now)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w (services.etcd.backup_config.timeout is %s)", err, timeout)
		}
		return nil, fmt.Errorf("take snapshot %s on %s: %w", name, src.node.Address, err)
	}
	progress(src.node.Address, fmt.Sprintf("saved %s (%d bytes, revision %d, %d keys, sha256 %s)", name, sc.Size, sc.Revision, sc.TotalKeys, sc.SHA256))

	res := &SaveResult{Sidecar: sc, Copies: make([]Copy, len(members))}
	side, err := sc.Marshal()
	if err != nil {
		return res, err
	}
	_ = fanout.Each(ctx, members, cl.MaxParallel, func(ctx context.Context, i int, m etcdNode) error {
		res.Copies[i].Node = m.node.Address
		if m.node.Address == src.node.Address {
			return nil
		}
		err := cl.copySnapshot(ctx, src.node.Address, m.node.Address, sc, side)
		if err == nil {
			progress(m.node.Address, "copied "+name+", sha256 verified")
		}
		res.Copies[i].Err = err
		return nil
	})
	var errs []error
	for _, c := range res.Copies {
		if c.Err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", c.Node, c.Err))
		}
	}

	if cfg := cl.s3Config(); cfg != nil {
		store, err := NewS3(cfg)
		if err == nil {
			err = store.Upload(ctx, sc, cl.openOn(src.node.Address, name))
		}
		if err != nil {
			res.S3Err = &UploadError{Name: name, Err: err}
			errs = append(errs, res.S3Err)
		} else {
			res.S3 = store.Where(name)
			progress(src.node.Address, "uploaded "+name+" and its sidecar to "+res.S3)
		}
	}
	return res, errors.Join(errs...)
}

// backupTimeout is backup_config.timeout, or its default.
func (cl *Cluster) backupTimeout() time.Duration {
	if b := cl.Backup; b != nil && b.Timeout > 0 {
		return time.Duration(b.Timeout) * time.Second
	}
	return time.Duration(spec.DefaultEtcdBackupTimeout) * time.Second
}

// openOn opens the snapshot name on the node, for S3.Upload.
func (cl *Cluster) openOn(node, name string) Opener {
	return func(ctx context.Context) (io.ReadCloser, int64, error) {
		e, err := cl.Engine(ctx, node)
		if err != nil {
			return nil, 0, err
		}
		return dockerop.OpenFile(ctx, e, node, cl.HelperImage, path.Join(Dir, name))
	}
}

// uploadMissing uploads to store, newest first, the snapshots of snaps
// that await their upload (Info.AwaitsUpload): snaps must say what S3
// holds, so that what it has is not sent again. Each is streamed from the
// first of its nodes whose copy has the sidecar's sha256 (S3.Upload checks
// it while sending, and removes an object that does not match). All of it
// is bounded by backup_config.timeout: what is left when it ends waits for
// the next run, as does each snapshot that could not be uploaded (an
// *UploadError in err). It sets the S3 of each snapshot uploaded and
// returns their names, oldest first.
func (cl *Cluster) uploadMissing(ctx context.Context, store *S3, snaps []Info) (uploaded []string, err error) {
	var todo []*Info
	for i := range snaps {
		if snaps[i].AwaitsUpload() {
			todo = append(todo, &snaps[i])
		}
	}
	slices.SortFunc(todo, func(a, b *Info) int {
		return cmp.Or(b.TakenAt.Compare(a.TakenAt), strings.Compare(b.Name, a.Name))
	})
	timeout := cl.backupTimeout()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var errs []error
	for i, si := range todo {
		if tctx.Err() != nil {
			if ctx.Err() != nil {
				errs = append(errs, ctx.Err())
			} else {
				errs = append(errs, fmt.Errorf("upload %d snapshot(s) s3 lacks: left for the next run, services.etcd.backup_config.timeout (%s) is spent", len(todo)-i, timeout))
			}
			break
		}
		var nodeErrs []error
		for _, node := range si.Nodes {
			err := store.Upload(tctx, si.Sidecar, cl.openOn(node, si.Name))
			if err == nil {
				nodeErrs = nil
				break
			}
			nodeErrs = append(nodeErrs, fmt.Errorf("from node %s: %w", node, err))
		}
		if len(nodeErrs) > 0 {
			errs = append(errs, &UploadError{Name: si.Name, Err: errors.Join(nodeErrs...)})
			continue
		}
		si.S3 = store.Where(si.Name)
		uploaded = append(uploaded, si.Name)
	}
	slices.Reverse(uploaded)
	return uploaded, errors.Join(errs...)
}

// UploadError is a snapshot that was saved on the etcd nodes but
// could not be uploaded to S3.
type UploadError struct {
	Name string
	Err  error
}

func (e *UploadError) Error() string {
	return fmt.Sprintf("upload snapshot %s to s3: %v; the snapshot is kept on the etcd nodes under %s", e.Name, e.Err, Dir)
}

func (e *UploadError) Unwrap() error { return e.Err }

// healthyMember is the first etcd node, in cluster.yml order, whose etcd
// answers /health.
func (cl *Cluster) healthyMember(ctx context.Context, members []etcdNode) (etcdNode, error) {
	chk, err := cl.checker()
	if err != nil {
		return etcdNode{}, err
	}
	var errs []error
	for _, m := range members {
		err := chk.Check(ctx, health.Target{Node: m.node.Address, InternalAddress: m.node.InternalAddress, Component: desired.Etcd})
		if err == nil {
			return m, nil
		}
		errs = append(errs, fmt.Errorf("node %s: %w", m.node.Address, err))
	}
	return etcdNode{}, fmt.Errorf("take a snapshot: no etcd member is healthy: %w", errors.Join(errs...))
}

// refuseExisting fails when a snapshot of that name is on any etcd node
// that answers: a snapshot is never overwritten.
func (cl *Cluster) refuseExisting(ctx context.Context, members []etcdNode, name string) error {
	has := make([]bool, len(members))
	if err := fanout.Each(ctx, members, cl.MaxParallel, func(ctx context.Context, i int, m etcdNode) error {
		e, err := cl.Engine(ctx, m.node.Address)
		if err != nil {
			return nil // unreachable: its copy fails later, with the reason
		}
		for _, f := range []string{name, name + SidecarSuffix} {
			_, err := dockerop.StatFile(ctx, e, m.node.Address, cl.HelperImage, path.Join(Dir, f))
			switch {
			case err == nil:
				has[i] = true
				return nil
			case !errors.Is(err, fs.ErrNotExist):
				return fmt.Errorf("node %s: %w", m.node.Address, err)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	var found []string
	for i, m := range members {
		if has[i] {
			found = append(found, m.node.Address)
		}
	}
	if len(found) > 0 {
		slices.Sort(found)
		return fmt.Errorf("a snapshot named %s is already on %s: choose another --name, or delete it first (rigger snapshot delete %s)",
			name, strings.Join(found, ", "), name)
	}
	return nil
}

// takeSnapshot runs etcdctl on the member's node from the etcd image:
// endpoint status (the server's version) and snapshot save; then the
// image's offline tool (offlineTool: etcdutl from 3.6 on) for snapshot
// status, sha256sum from the helper image, and writes the sidecar.
func (cl *Cluster) takeSnapshot(ctx context.Context, m etcdNode, name, kind string, now time.Time) (*Sidecar, error) {
	node := m.node.Address
	e, err := cl.Engine(ctx, node)
	if err != nil {
		return nil, err
	}
	file := path.Join(Dir, name)
	run := func(tool string, args ...string) ([]byte, error) {
		return dockerop.RunOutput(ctx, e, node, m.etcd.Image, append([]string{tool}, args...), dockerop.RunOptions{
			Binds: snapshotBinds, Env: etcdctlEnv(m.etcd), NetworkMode: desired.NetworkModeHost,
		})
	}
	etcdctl := func(args ...string) ([]byte, error) { return run("etcdctl", args...) }
	out, err := etcdctl("endpoint", "status", "-w", "json")
	if err != nil {
		return nil, err
	}
	version, err := ParseEndpointVersion(out)
	if err != nil {
		return nil, err
	}
	if _, err := etcdctl("snapshot", "save", file); err != nil {
		return nil, err
	}
	removeBad := func(err error) error {
		if rerr := cl.removeSnapshotFiles(context.WithoutCancel(ctx), e, node, name); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	// The image is the one cluster.yml asks for: before an upgrade to
	// etcd 3.6, the new one, whose etcdctl reads no snapshot file.
	out, err = run(offlineTool(m.etcd.Image), "snapshot", "status", file, "-w", "json")
	if err != nil {
		return nil, removeBad(err)
	}
	st, err := ParseStatus(out)
	if err != nil {
		return nil, removeBad(err)
	}
	fi, err := dockerop.StatFile(ctx, e, node, cl.HelperImage, file)
	if err != nil {
		return nil, removeBad(err)
	}
	if fi.Size <= 0 {
		return nil, removeBad(fmt.Errorf("%s is empty", file))
	}
	sum, err := cl.sha256On(ctx, e, node, file)
	if err != nil {
		return nil, removeBad(err)
	}
	ca := sha256.Sum256(cl.PKI.Certs[pki.CACertName].CertPEM)
	sc := &Sidecar{
		Format: SidecarFormat, Name: name, Kind: kind,
		Node: node, Hostname: m.node.Hostname, TakenAt: now,
		Size: fi.Size, SHA256: sum,
		Revision: st.Revision, Hash: st.Hash, TotalKeys: st.TotalKeys,
		EtcdVersion: version, EtcdImage: m.etcd.Image,
		PKIFingerprint: hex.EncodeToString(ca[:]),
		Cluster:        ClusterState{ClusterName: cl.Name, KubernetesVersion: cl.KubernetesVersion},
	}
	for _, n := range cl.Desired.Nodes {
		sc.Cluster.Nodes = append(sc.Cluster.Nodes, NodeState{
			Address: n.Address, InternalAddress: n.InternalAddress, Hostname: n.Hostname, Roles: n.Roles})
	}
	if err := sc.Validate(); err != nil {
		return nil, removeBad(err)
	}
	b, err := sc.Marshal()
	if err != nil {
		return nil, removeBad(err)
	}
	if err := dockerop.WriteFiles(ctx, e, node, cl.HelperImage, Dir, map[string][]byte{file + SidecarSuffix: b}); err != nil {
		return nil, removeBad(err)
	}
	return sc, nil
}

// sha256On computes a file's sha256 on the node, with sha256sum from the
// helper image.
func (cl *Cluster) sha256On(ctx context.Context, e dockerop.Engine, node, file string) (string, error) {
	out, err := dockerop.RunOutput(ctx, e, node, cl.HelperImage, []string{"sha256sum", file},
		dockerop.RunOptions{Binds: []string{Dir + ":" + Dir + ":ro"}})
	if err != nil {
		return "", err
	}
	return ParseSHA256Sum(out, file)
}

// removeSnapshotFiles removes a snapshot and its sidecar from the node.
func (cl *Cluster) removeSnapshotFiles(ctx context.Context, e dockerop.Engine, node, name string) error {
	file := path.Join(Dir, name)
	return dockerop.Run(ctx, e, node, cl.HelperImage, []string{"rm", "-f", file, file + SidecarSuffix},
		[]string{Dir + ":" + Dir})
}

// copySnapshot streams the snapshot from node from to node to through the
// archive API (placeSnapshot).
func (cl *Cluster) copySnapshot(ctx context.Context, from, to string, sc *Sidecar, side []byte) error {
	src, err := cl.Engine(ctx, from)
	if err != nil {
		return err
	}
	rc, size, err := dockerop.OpenFile(ctx, src, from, cl.HelperImage, path.Join(Dir, sc.Name))
	if err != nil {
		return err
	}
	defer rc.Close()
	if size != sc.Size {
		return fmt.Errorf("the snapshot on %s is %d bytes, its sidecar says %d", from, size, sc.Size)
	}
	return cl.placeSnapshot(ctx, to, sc, side, rc, size)
}

// placeSnapshot writes the snapshot read from r (size bytes) to node to,
// checks its sha256 there against the sidecar, and writes the sidecar. A
// copy that fails is removed.
func (cl *Cluster) placeSnapshot(ctx context.Context, to string, sc *Sidecar, side []byte, r io.Reader, size int64) error {
	dst, err := cl.Engine(ctx, to)
	if err != nil {
		return err
	}
	file := path.Join(Dir, sc.Name)
	removeBad := func(err error) error {
		if rerr := cl.removeSnapshotFiles(context.WithoutCancel(ctx), dst, to, sc.Name); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if err := dockerop.WriteStream(ctx, dst, to, cl.HelperImage, file, size, r); err != nil {
		return removeBad(err)
	}
	sum, err := cl.sha256On(ctx, dst, to, file)
	if err != nil {
		return removeBad(err)
	}
	if sum != sc.SHA256 {
		return removeBad(fmt.Errorf("the copy has sha256 %s, the sidecar says %s: removed", sum, sc.SHA256))
	}
	if err := dockerop.WriteFiles(ctx, dst, to, cl.HelperImage, Dir, map[string][]byte{file + SidecarSuffix: side}); err != nil {
		return removeBad(err)
	}
	return nil
}
