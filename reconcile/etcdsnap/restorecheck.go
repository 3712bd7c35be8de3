package etcdsnap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/fanout"
	"github.com/rigger/rigger/reconcile/pki"
)

// checkRestore is the check before a restore: it changes nothing on the
// cluster (it may copy a missing snapshot to a node's snapshot directory,
// or the source's copy of a snapshot without a sidecar to FetchDir).
// fromNode is RestoreOptions.FromNode.
func (cl *Cluster) checkRestore(ctx context.Context, name, fromNode string, members []etcdNode, progress func(node, msg string)) (*RestoreCheck, error) {
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
	var s3c *s3Copy
	var store *S3
	dec, err := decideRestore(name, copies, s3c, cfg != nil, ca, fromNode)
	if err == nil && dec.NeedS3 {
		s3c = &s3Copy{}
		store, s3c.Err = NewS3(cfg)
		if s3c.Err == nil {
			s3c.Where = store.Where(name)
			s3c.Present, s3c.Size, s3c.Sidecar, s3c.Err = cl.findS3Copy(ctx, store, name)
		}
		dec, err = decideRestore(name, copies, s3c, true, ca, fromNode)
	}
	if err == nil && dec.CheckHash != "" {
		i := slices.IndexFunc(copies, func(c nodeCopy) bool { return c.Node == dec.CheckHash })
		c := &copies[i]
		c.HashChecked = true
		if c.Present {
			c.HashErr, c.Err = cl.checkIntegrity(ctx, dec.CheckHash, name)
		} else {
			c.Unzipped, c.HashErr, c.Err = cl.unzipCopy(ctx, dec.CheckHash, name)
			if c.Unzipped != nil {
				defer os.Remove(c.Unzipped.File)
				c.Size, c.SHA256 = c.Unzipped.Size, c.Unzipped.SHA256
			}
		}
		dec, err = decideRestore(name, copies, s3c, cfg != nil, ca, fromNode)
	}
	if err != nil {
		return nil, err
	}
	sc := dec.Sidecar
	chk := &RestoreCheck{Name: name, Sidecar: sc, Verified: dec.Verified, FetchedFrom: map[string]string{}, Files: map[string]string{},
		Members: restoreMembers(members), Source: dec.Source, Size: dec.Size, SHA256: dec.SHA256}
	for _, m := range members {
		chk.Files[m.node.Address] = path.Join(Dir, name)
	}
	if sc != nil {
		for _, n := range dec.Verified {
			progress(n, fmt.Sprintf("%s present, %d bytes, sha256 %s verified", name, sc.Size, sc.SHA256))
		}
	} else if dec.Unzipped == nil {
		progress(dec.Source, fmt.Sprintf("%s present without a sidecar (taken without rigger), %d bytes, sha256 %s, etcd's integrity hash verified: every member restores this copy",
			name, dec.Size, dec.SHA256))
	} else {
		progress(dec.Source, fmt.Sprintf("%s%s present without a sidecar (RKE's zip file), unzipped by rigger to %d bytes, sha256 %s, etcd's integrity hash verified: every member restores it (the zip file is left as it is)",
			name, zipSuffix, dec.Size, dec.SHA256))
	}
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
	if err := cl.fetchMissing(ctx, chk, dec, store, members, progress); err != nil {
		return nil, errors.Join(err, cl.removeAllFetched(ctx, chk))
	}

	// etcdctl must read it, and agree with the sidecar (or, without one,
	// with the source's copy), on every node.
	statuses := make([]Status, len(members))
	err = fanout.Each(ctx, members, cl.MaxParallel, func(ctx context.Context, i int, m etcdNode) error {
		st, err := cl.snapshotStatus(ctx, m, chk.Files[m.node.Address])
		if err != nil {
			return fmt.Errorf("node %s: %w", m.node.Address, err)
		}
		statuses[i] = st
		return nil
	})
	if err == nil {
		err = agreeStatus(chk, members, statuses, progress)
	}
	if err != nil {
		return nil, errors.Join(err, cl.removeAllFetched(ctx, chk))
	}
	return chk, nil
}

// fetchMissing copies the snapshot where the decision says: a missing copy
// of a snapshot with a sidecar to the node's Dir (with the sidecar), the
// source's copy of one without a sidecar to every other node's FetchDir;
// each verified where it lands.
func (cl *Cluster) fetchMissing(ctx context.Context, chk *RestoreCheck, dec *restoreDecision, store *S3, members []etcdNode, progress func(node, msg string)) error {
	name, sc := chk.Name, chk.Sidecar
	var side []byte
	if sc != nil {
		var err error
		if side, err = sc.Marshal(); err != nil {
			return err
		}
	}
	var errs []error
	for _, m := range members {
		src, ok := dec.Fetch[m.node.Address]
		if !ok {
			continue
		}
		to, where := m.node.Address, "node "+src
		var err error
		switch {
		case sc == nil && dec.Unzipped != nil:
			chk.Files[to] = fetchPath(name)
			where += " (" + name + zipSuffix + ", unzipped)"
			err = cl.fetchUnzipped(ctx, dec.Unzipped, to, name)
		case sc == nil:
			chk.Files[to] = fetchPath(name)
			err = cl.fetchCopy(ctx, src, to, name, dec.Size, dec.SHA256)
		case src == fromS3:
			where = store.Where(name)
			err = cl.fetchFromS3(ctx, store, to, sc, side)
		default:
			err = cl.copySnapshot(ctx, src, to, sc, side)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: fetch %s from %s: %w", to, name, where, err))
			continue
		}
		chk.Fetched = append(chk.Fetched, to)
		chk.FetchedFrom[to] = where
		if sc == nil && dec.Unzipped != nil {
			progress(to, fmt.Sprintf("the snapshot unzipped from %s's %s%s written to %s, sha256 verified (this node's own files of that name are left as they are)", src, name, zipSuffix, fetchPath(name)))
		} else if sc == nil {
			progress(to, fmt.Sprintf("%s's copy fetched to %s, sha256 verified (this node's own %s, if any, is left as it is)", src, fetchPath(name), path.Join(Dir, name)))
		} else {
			progress(to, fmt.Sprintf("%s was missing: copied from %s, sha256 verified", name, where))
		}
	}
	return errors.Join(errs...)
}

// agreeStatus checks etcdctl snapshot status of every member's file
// (statuses, in members' order) against the sidecar, or, for a snapshot
// without one, against the source's (the same bytes), and keeps the
// source's in chk.Status.
func agreeStatus(chk *RestoreCheck, members []etcdNode, statuses []Status, progress func(node, msg string)) error {
	want, from := Status{}, "the sidecar"
	if sc := chk.Sidecar; sc != nil {
		want = Status{Hash: sc.Hash, Revision: sc.Revision, TotalKeys: sc.TotalKeys}
	} else {
		from = "the copy of " + chk.Source
		for i, m := range members {
			if m.node.Address == chk.Source {
				want, chk.Status = statuses[i], statuses[i]
			}
		}
	}
	var errs []error
	for i, m := range members {
		st := statuses[i]
		if st.Hash != want.Hash || st.Revision != want.Revision || st.TotalKeys != want.TotalKeys {
			errs = append(errs, fmt.Errorf("node %s: snapshot status of %s says hash %d, revision %d, %d keys; %s hash %d, revision %d, %d keys",
				m.node.Address, chk.Files[m.node.Address], st.Hash, st.Revision, st.TotalKeys, from, want.Hash, want.Revision, want.TotalKeys))
			continue
		}
		progress(m.node.Address, fmt.Sprintf("snapshot status: revision %d, %d keys, hash %d", st.Revision, st.TotalKeys, st.Hash))
	}
	return errors.Join(errs...)
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
	default:
		_, err := dockerop.StatFile(ctx, e, node, cl.HelperImage, file+zipSuffix)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.Err = err
			return c
		}
		c.Zipped = err == nil
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

// snapshotStatus runs `etcdctl snapshot status` on the member's file (a
// path under Dir).
func (cl *Cluster) snapshotStatus(ctx context.Context, m etcdNode, file string) (Status, error) {
	e, err := cl.Engine(ctx, m.node.Address)
	if err != nil {
		return Status{}, err
	}
	out, err := dockerop.RunOutput(ctx, e, m.node.Address, m.etcd.Image,
		[]string{offlineTool(m.etcd.Image), "snapshot", "status", file, "-w", "json"},
		dockerop.RunOptions{Binds: []string{Dir + ":" + Dir + ":ro"}, Env: []string{"ETCDCTL_API=3"}})
	if err != nil {
		return Status{}, err
	}
	return ParseStatus(out)
}
