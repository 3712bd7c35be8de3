package reconcile

import (
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
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/etcdsnap"
	"github.com/rigger/rigger/reconcile/health"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// SnapshotOptions are the choices of one SaveSnapshot.
type SnapshotOptions struct {
	// Name of the snapshot; empty: etcdsnap.Name of the cluster, the time
	// and the node it is taken on.
	Name string
	// Kind is etcdsnap.KindManual (the default) or KindScheduled.
	Kind string
	// Progress, when set, receives a line per thing done on a node. It is
	// called from one goroutine at a time.
	Progress func(node, msg string)
}

// SnapshotResult is what SaveSnapshot did.
type SnapshotResult struct {
	// Sidecar describes the snapshot taken; nil when none was.
	Sidecar *etcdsnap.Sidecar
	// Copies are the etcd nodes, in cluster.yml order, with whether the
	// snapshot is there and verified (Err nil).
	Copies []SnapshotCopy
	// S3 is where the snapshot was uploaded, "" when it was not (no
	// s3backupconfig, or the upload failed: S3Err).
	S3    string
	S3Err error
}

// SnapshotCopy is the snapshot on one etcd node.
type SnapshotCopy struct {
	Node string
	// Err says why the snapshot is not on the node, verified.
	Err error
}

// etcdNode is an etcd node of cluster.yml as desired builds it.
type etcdNode struct {
	node *desired.Node
	etcd *desired.Container
}

// etcdNodes are cluster.yml's etcd nodes, in its order, with their etcd
// containers' desired specs.
func etcdNodes(d *desired.Cluster) []etcdNode {
	var out []etcdNode
	for i := range d.Nodes {
		n := &d.Nodes[i]
		for j := range n.Containers {
			if n.Containers[j].Name == desired.Etcd {
				out = append(out, etcdNode{node: n, etcd: &n.Containers[j]})
			}
		}
	}
	return out
}

// snapshotBinds are the binds of the etcdctl containers: the certificates
// read-only, the snapshot directory.
var snapshotBinds = []string{desired.KubernetesDir + ":" + desired.KubernetesDir + ":ro", etcdsnap.Dir + ":" + etcdsnap.Dir}

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

// SaveSnapshot takes a snapshot of etcd on one healthy member, verifies it
// (etcdctl snapshot status, size, sha256), stores it with its sidecar under
// etcdsnap.Dir on that node, copies it to every other etcd node (verifying
// the checksum there), and uploads it to S3 when s3backupconfig is set.
//
// The error is nil only when all of that succeeded. A snapshot that was
// taken is never removed for a failed copy or upload: the result then says
// where it is, and the error what failed (a *SnapshotUploadError for S3).
func (s *Session) SaveSnapshot(ctx context.Context, o SnapshotOptions) (*SnapshotResult, error) {
	progress := serialized(o.Progress)
	kind := o.Kind
	if kind == "" {
		kind = etcdsnap.KindManual
	}
	if o.Name != "" {
		if err := etcdsnap.CheckName(o.Name); err != nil {
			return nil, err
		}
	}
	set, d, members, err := s.etcdCluster(ctx, "take a snapshot")
	if err != nil {
		return nil, err
	}
	src, err := s.healthyMember(ctx, set, members)
	if err != nil {
		return nil, err
	}
	now := s.opts.Now().UTC().Truncate(time.Second)
	name := o.Name
	if name == "" {
		name = etcdsnap.Name(s.c.ClusterName, now, src.node.Hostname)
	}
	if err := s.refuseExisting(ctx, members, name); err != nil {
		return nil, err
	}

	timeout := time.Duration(spec.DefaultEtcdBackupTimeout) * time.Second
	if b := s.c.Services.Etcd.BackupConfig; b != nil && b.Timeout > 0 {
		timeout = time.Duration(b.Timeout) * time.Second
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sc, err := s.takeSnapshot(tctx, src, name, kind, now, set, d)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w (services.etcd.backup_config.timeout is %s)", err, timeout)
		}
		return nil, fmt.Errorf("take snapshot %s on %s: %w", name, src.node.Address, err)
	}
	progress(src.node.Address, fmt.Sprintf("saved %s (%d bytes, revision %d, %d keys, sha256 %s)", name, sc.Size, sc.Revision, sc.TotalKeys, sc.SHA256))

	res := &SnapshotResult{Sidecar: sc, Copies: make([]SnapshotCopy, len(members))}
	side, err := sc.Marshal()
	if err != nil {
		return res, err
	}
	g, gctx := s.fanOut(ctx)
	for i, m := range members {
		res.Copies[i].Node = m.node.Address
		if m.node.Address == src.node.Address {
			continue
		}
		g.Go(func() error {
			err := s.copySnapshot(gctx, src.node.Address, m.node.Address, sc, side)
			if err == nil {
				progress(m.node.Address, "copied "+name+", sha256 verified")
			}
			res.Copies[i].Err = err
			return nil
		})
	}
	_ = g.Wait()
	var errs []error
	for _, c := range res.Copies {
		if c.Err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", c.Node, c.Err))
		}
	}

	if cfg := s.s3Config(); cfg != nil {
		store, err := etcdsnap.NewS3(cfg)
		if err == nil {
			err = store.Upload(ctx, sc, func(ctx context.Context) (io.ReadCloser, int64, error) {
				e, err := s.tr.Docker(ctx, src.node.Address)
				if err != nil {
					return nil, 0, err
				}
				return dockerop.OpenFile(ctx, e, src.node.Address, s.c.SystemImages.Alpine, path.Join(etcdsnap.Dir, name))
			})
		}
		if err != nil {
			res.S3Err = &SnapshotUploadError{Name: name, Err: err}
			errs = append(errs, res.S3Err)
		} else {
			res.S3 = store.Where(name)
			progress(src.node.Address, "uploaded "+name+" and its sidecar to "+res.S3)
		}
	}
	return res, errors.Join(errs...)
}

// SnapshotUploadError is a snapshot that was saved on the etcd nodes but
// could not be uploaded to S3.
type SnapshotUploadError struct {
	Name string
	Err  error
}

func (e *SnapshotUploadError) Error() string {
	return fmt.Sprintf("upload snapshot %s to s3: %v; the snapshot is kept on the etcd nodes under %s", e.Name, e.Err, etcdsnap.Dir)
}

func (e *SnapshotUploadError) Unwrap() error { return e.Err }

func (s *Session) s3Config() *spec.S3BackupConfig {
	if b := s.c.Services.Etcd.BackupConfig; b != nil {
		return b.S3BackupConfig
	}
	return nil
}

// healthyMember is the first etcd node, in cluster.yml order, whose etcd
// answers /health.
func (s *Session) healthyMember(ctx context.Context, set *pki.Set, members []etcdNode) (etcdNode, error) {
	chk, err := s.checker(set)
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
func (s *Session) refuseExisting(ctx context.Context, members []etcdNode, name string) error {
	g, gctx := errgroup.WithContext(ctx)
	var mu sync.Mutex
	var found []string
	for _, m := range members {
		g.Go(func() error {
			e, err := s.tr.Docker(gctx, m.node.Address)
			if err != nil {
				return nil // unreachable: its copy fails later, with the reason
			}
			for _, f := range []string{name, name + etcdsnap.SidecarSuffix} {
				_, err := dockerop.StatFile(gctx, e, m.node.Address, s.c.SystemImages.Alpine, path.Join(etcdsnap.Dir, f))
				switch {
				case err == nil:
					mu.Lock()
					found = append(found, m.node.Address)
					mu.Unlock()
					return nil
				case !errors.Is(err, fs.ErrNotExist):
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if len(found) > 0 {
		slices.Sort(found)
		return fmt.Errorf("a snapshot named %s is already on %s: choose another --name, or delete it first (rigger snapshot delete %s)",
			name, strings.Join(found, ", "), name)
	}
	return nil
}

// takeSnapshot runs etcdctl on the member's node from the etcd image:
// endpoint status (the server's version), snapshot save and snapshot
// status; then sha256sum from the helper image, and writes the sidecar.
func (s *Session) takeSnapshot(ctx context.Context, m etcdNode, name, kind string, now time.Time, set *pki.Set, d *desired.Cluster) (*etcdsnap.Sidecar, error) {
	node := m.node.Address
	e, err := s.tr.Docker(ctx, node)
	if err != nil {
		return nil, err
	}
	file := path.Join(etcdsnap.Dir, name)
	etcdctl := func(args ...string) ([]byte, error) {
		return dockerop.RunOutput(ctx, e, node, m.etcd.Image, append([]string{"etcdctl"}, args...), dockerop.RunOptions{
			Binds: snapshotBinds, Env: etcdctlEnv(m.etcd), NetworkMode: desired.NetworkModeHost,
		})
	}
	out, err := etcdctl("endpoint", "status", "-w", "json")
	if err != nil {
		return nil, err
	}
	version, err := etcdsnap.ParseEndpointVersion(out)
	if err != nil {
		return nil, err
	}
	if _, err := etcdctl("snapshot", "save", file); err != nil {
		return nil, err
	}
	removeBad := func(err error) error {
		if rerr := s.removeSnapshotFiles(context.WithoutCancel(ctx), e, node, name); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	out, err = etcdctl("snapshot", "status", file, "-w", "json")
	if err != nil {
		return nil, removeBad(err)
	}
	st, err := etcdsnap.ParseStatus(out)
	if err != nil {
		return nil, removeBad(err)
	}
	fi, err := dockerop.StatFile(ctx, e, node, s.c.SystemImages.Alpine, file)
	if err != nil {
		return nil, removeBad(err)
	}
	if fi.Size <= 0 {
		return nil, removeBad(fmt.Errorf("%s is empty", file))
	}
	sum, err := s.sha256On(ctx, e, node, file)
	if err != nil {
		return nil, removeBad(err)
	}
	ca := sha256.Sum256(set.Certs[pki.CACertName].CertPEM)
	sc := &etcdsnap.Sidecar{
		Format: etcdsnap.SidecarFormat, Name: name, Kind: kind,
		Node: node, Hostname: m.node.Hostname, TakenAt: now,
		Size: fi.Size, SHA256: sum,
		Revision: st.Revision, Hash: st.Hash, TotalKeys: st.TotalKeys,
		EtcdVersion: version, EtcdImage: m.etcd.Image,
		PKIFingerprint: hex.EncodeToString(ca[:]),
		Cluster:        etcdsnap.ClusterState{ClusterName: s.c.ClusterName, KubernetesVersion: s.c.KubernetesVersion},
	}
	for _, n := range d.Nodes {
		sc.Cluster.Nodes = append(sc.Cluster.Nodes, etcdsnap.NodeState{
			Address: n.Address, InternalAddress: n.InternalAddress, Hostname: n.Hostname, Roles: n.Roles})
	}
	if err := sc.Validate(); err != nil {
		return nil, removeBad(err)
	}
	b, err := sc.Marshal()
	if err != nil {
		return nil, removeBad(err)
	}
	if err := dockerop.WriteFiles(ctx, e, node, s.c.SystemImages.Alpine, etcdsnap.Dir, map[string][]byte{file + etcdsnap.SidecarSuffix: b}); err != nil {
		return nil, removeBad(err)
	}
	return sc, nil
}

// sha256On computes a file's sha256 on the node, with sha256sum from the
// helper image.
func (s *Session) sha256On(ctx context.Context, e dockerop.Engine, node, file string) (string, error) {
	out, err := dockerop.RunOutput(ctx, e, node, s.c.SystemImages.Alpine, []string{"sha256sum", file},
		dockerop.RunOptions{Binds: []string{etcdsnap.Dir + ":" + etcdsnap.Dir + ":ro"}})
	if err != nil {
		return "", err
	}
	return etcdsnap.ParseSHA256Sum(out, file)
}

// removeSnapshotFiles removes a snapshot and its sidecar from the node.
func (s *Session) removeSnapshotFiles(ctx context.Context, e dockerop.Engine, node, name string) error {
	file := path.Join(etcdsnap.Dir, name)
	return dockerop.Run(ctx, e, node, s.c.SystemImages.Alpine, []string{"rm", "-f", file, file + etcdsnap.SidecarSuffix},
		[]string{etcdsnap.Dir + ":" + etcdsnap.Dir})
}

// etcdCluster is what every snapshot operation starts from: the cluster's
// PKI, its desired state and its etcd nodes (at least one).
func (s *Session) etcdCluster(ctx context.Context, verb string) (*pki.Set, *desired.Cluster, []etcdNode, error) {
	set, err := s.PKI(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	d, err := desired.Build(s.c)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("build desired state: %w", err)
	}
	members := etcdNodes(d)
	if len(members) == 0 {
		return nil, nil, nil, errors.New(verb + ": cluster.yml has no etcd node")
	}
	return set, d, members, nil
}

// fanOut is an errgroup for work on several nodes, at most
// rigger.max_parallel at once.
func (s *Session) fanOut(ctx context.Context) (*errgroup.Group, context.Context) {
	g, gctx := errgroup.WithContext(ctx)
	if s.c.Rigger.MaxParallel > 0 {
		g.SetLimit(s.c.Rigger.MaxParallel)
	}
	return g, gctx
}

// serialized calls f one call at a time; a nil f is a no-op.
func serialized(f func(node, msg string)) func(node, msg string) {
	var mu sync.Mutex
	return func(node, msg string) {
		if f != nil {
			mu.Lock()
			defer mu.Unlock()
			f(node, msg)
		}
	}
}

// copySnapshot streams the snapshot from node from to node to through the
// archive API (placeSnapshot).
func (s *Session) copySnapshot(ctx context.Context, from, to string, sc *etcdsnap.Sidecar, side []byte) error {
	src, err := s.tr.Docker(ctx, from)
	if err != nil {
		return err
	}
	rc, size, err := dockerop.OpenFile(ctx, src, from, s.c.SystemImages.Alpine, path.Join(etcdsnap.Dir, sc.Name))
	if err != nil {
		return err
	}
	defer rc.Close()
	if size != sc.Size {
		return fmt.Errorf("the snapshot on %s is %d bytes, its sidecar says %d", from, size, sc.Size)
	}
	return s.placeSnapshot(ctx, to, sc, side, rc, size)
}

// placeSnapshot writes the snapshot read from r (size bytes) to node to,
// checks its sha256 there against the sidecar, and writes the sidecar. A
// copy that fails is removed.
func (s *Session) placeSnapshot(ctx context.Context, to string, sc *etcdsnap.Sidecar, side []byte, r io.Reader, size int64) error {
	dst, err := s.tr.Docker(ctx, to)
	if err != nil {
		return err
	}
	file := path.Join(etcdsnap.Dir, sc.Name)
	removeBad := func(err error) error {
		if rerr := s.removeSnapshotFiles(context.WithoutCancel(ctx), dst, to, sc.Name); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if err := dockerop.WriteStream(ctx, dst, to, s.c.SystemImages.Alpine, file, size, r); err != nil {
		return removeBad(err)
	}
	sum, err := s.sha256On(ctx, dst, to, file)
	if err != nil {
		return removeBad(err)
	}
	if sum != sc.SHA256 {
		return removeBad(fmt.Errorf("the copy has sha256 %s, the sidecar says %s: removed", sum, sc.SHA256))
	}
	if err := dockerop.WriteFiles(ctx, dst, to, s.c.SystemImages.Alpine, etcdsnap.Dir, map[string][]byte{file + etcdsnap.SidecarSuffix: side}); err != nil {
		return removeBad(err)
	}
	return nil
}

// SnapshotInfo is one snapshot as found on the etcd nodes and in S3.
type SnapshotInfo struct {
	Name string `json:"name"`
	// Sidecar is the snapshot's sidecar (from a node, else from S3); nil
	// when it has none (a snapshot rigger did not take).
	Sidecar *etcdsnap.Sidecar `json:"sidecar,omitempty"`
	// TakenAt is the sidecar's time, else the name's, else the file's.
	TakenAt time.Time `json:"taken_at"`
	Size    int64     `json:"size"`
	// Nodes are the etcd nodes that hold it, sorted.
	Nodes []string `json:"nodes,omitempty"`
	// Damaged are nodes whose copy's size differs from the sidecar's.
	Damaged []string `json:"damaged,omitempty"`
	// S3 is where it is in S3, "" when it is not there.
	S3 string `json:"s3,omitempty"`
}

// SnapshotList is what ListSnapshots found.
type SnapshotList struct {
	// Snapshots sorted by time, then name.
	Snapshots []SnapshotInfo
	// Unlisted are the nodes (and S3) that could not be listed, with why.
	Unlisted []error
}

// ListSnapshots lists the snapshots under etcdsnap.Dir on every etcd node
// of cluster.yml, and in S3 when withS3 and s3backupconfig are set.
func (s *Session) ListSnapshots(ctx context.Context, withS3 bool) (*SnapshotList, error) {
	var addrs []string
	for _, n := range s.c.Nodes {
		if slices.Contains(n.Role, spec.RoleEtcd) {
			addrs = append(addrs, n.Address)
		}
	}
	type nodeList struct {
		files    []dockerop.FileInfo
		sidecars map[string][]byte
		err      error
	}
	lists := make([]nodeList, len(addrs))
	g, gctx := s.fanOut(ctx)
	for i, a := range addrs {
		g.Go(func() error {
			l := &lists[i]
			e, err := s.tr.Docker(gctx, a)
			if err != nil {
				l.err = err
				return nil
			}
			if l.files, l.err = dockerop.ListDir(gctx, e, a, s.c.SystemImages.Alpine, etcdsnap.Dir); l.err != nil {
				return nil
			}
			var want []string
			for _, f := range l.files {
				if strings.HasSuffix(f.Path, etcdsnap.SidecarSuffix) {
					want = append(want, f.Path)
				}
			}
			l.sidecars, l.err = dockerop.ReadFiles(gctx, e, a, s.c.SystemImages.Alpine, want)
			return nil
		})
	}
	_ = g.Wait()

	out := &SnapshotList{}
	byName := map[string]*SnapshotInfo{}
	get := func(name string) *SnapshotInfo {
		if si, ok := byName[name]; ok {
			return si
		}
		si := &SnapshotInfo{Name: name}
		byName[name] = si
		return si
	}
	for i, l := range lists {
		if l.err != nil {
			out.Unlisted = append(out.Unlisted, fmt.Errorf("node %s: %w", addrs[i], l.err))
			continue
		}
		for _, f := range l.files {
			name := path.Base(f.Path)
			if strings.HasSuffix(name, etcdsnap.SidecarSuffix) || etcdsnap.CheckName(name) != nil {
				continue
			}
			si := get(name)
			if si.Sidecar == nil {
				if b, ok := l.sidecars[f.Path+etcdsnap.SidecarSuffix]; ok {
					if sc, err := etcdsnap.ParseSidecar(b); err == nil && sc.Name == name {
						si.Sidecar = sc
					}
				}
			}
			if si.Size == 0 {
				si.Size = f.Size
			}
			if si.TakenAt.IsZero() || f.ModTime.Before(si.TakenAt) {
				si.TakenAt = f.ModTime
			}
			si.Nodes = append(si.Nodes, addrs[i])
		}
	}
	if cfg := s.s3Config(); withS3 && cfg != nil {
		store, err := etcdsnap.NewS3(cfg)
		var objs []etcdsnap.Object
		if err == nil {
			objs, err = store.List(ctx)
		}
		if err != nil {
			out.Unlisted = append(out.Unlisted, err)
		}
		for _, o := range objs {
			si := get(o.Name)
			si.S3 = store.Where(o.Name)
			if si.Sidecar == nil && o.Sidecar != nil && o.Sidecar.Name == o.Name {
				si.Sidecar = o.Sidecar
			}
			if si.Size == 0 {
				si.Size = o.Size
			}
		}
	}
	// A copy whose size is not the sidecar's is damaged, not held.
	for i, l := range lists {
		for _, f := range l.files {
			si, ok := byName[path.Base(f.Path)]
			if ok && si.Sidecar != nil && f.Size != si.Sidecar.Size {
				si.Nodes = slices.DeleteFunc(si.Nodes, func(a string) bool { return a == addrs[i] })
				si.Damaged = append(si.Damaged, addrs[i])
			}
		}
	}
	for _, si := range byName {
		if sc := si.Sidecar; sc != nil {
			si.TakenAt, si.Size = sc.TakenAt, sc.Size
		} else if p, ok := etcdsnap.ParseName(si.Name); ok {
			si.TakenAt = p.Time
		}
		slices.Sort(si.Nodes)
		slices.Sort(si.Damaged)
		out.Snapshots = append(out.Snapshots, *si)
	}
	slices.SortFunc(out.Snapshots, func(a, b SnapshotInfo) int {
		if c := a.TakenAt.Compare(b.TakenAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var err error
	if len(out.Unlisted) > 0 {
		err = errors.Join(out.Unlisted...)
	}
	return out, err
}

// DeleteResult is what DeleteSnapshot removed.
type DeleteResult struct {
	// Deleted are the etcd nodes (and the S3 location) it was removed from.
	Deleted []string
}

// DeleteSnapshot removes the snapshot name and its sidecar from every etcd
// node of cluster.yml, and from S3 when withS3 (s3backupconfig must be
// set then). A snapshot found nowhere is an error; so is a node that does
// not answer (it may still hold it).
func (s *Session) DeleteSnapshot(ctx context.Context, name string, withS3 bool) (*DeleteResult, error) {
	if err := etcdsnap.CheckName(name); err != nil {
		return nil, err
	}
	cfg := s.s3Config()
	if withS3 && cfg == nil {
		return nil, errors.New("delete from s3: services.etcd.backup_config.s3backupconfig is not set in cluster.yml")
	}
	var addrs []string
	for _, n := range s.c.Nodes {
		if slices.Contains(n.Role, spec.RoleEtcd) {
			addrs = append(addrs, n.Address)
		}
	}
	deleted := make([]bool, len(addrs))
	errs := make([]error, len(addrs))
	g, gctx := s.fanOut(ctx)
	for i, a := range addrs {
		g.Go(func() error {
			e, err := s.tr.Docker(gctx, a)
			if err == nil {
				deleted[i], err = s.deleteOn(gctx, e, a, name)
			}
			if err != nil {
				errs[i] = fmt.Errorf("node %s: %w", a, err)
			}
			return nil
		})
	}
	_ = g.Wait()
	res := &DeleteResult{}
	for i, a := range addrs {
		if deleted[i] {
			res.Deleted = append(res.Deleted, a)
		}
	}
	if withS3 {
		store, err := etcdsnap.NewS3(cfg)
		var found bool
		if err == nil {
			found, err = store.Delete(ctx, name)
		}
		if err != nil {
			errs = append(errs, err)
		} else if found {
			res.Deleted = append(res.Deleted, store.Where(name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if len(res.Deleted) == 0 {
		where := "on the etcd nodes"
		if withS3 {
			where += " or in s3"
		}
		return res, fmt.Errorf("no snapshot named %s %s (rigger snapshot list shows them)", name, where)
	}
	return res, nil
}

// deleteOn removes the snapshot and its sidecar from one node; found says
// whether either was there.
func (s *Session) deleteOn(ctx context.Context, e dockerop.Engine, node, name string) (bool, error) {
	found := false
	for _, f := range []string{name, name + etcdsnap.SidecarSuffix} {
		_, err := dockerop.StatFile(ctx, e, node, s.c.SystemImages.Alpine, path.Join(etcdsnap.Dir, f))
		if err == nil {
			found = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	if !found {
		return false, nil
	}
	return true, s.removeSnapshotFiles(ctx, e, node, name)
}
