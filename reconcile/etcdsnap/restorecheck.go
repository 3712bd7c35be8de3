package etcdsnap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/pki"
)

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
