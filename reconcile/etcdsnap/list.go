package etcdsnap

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/fanout"
)

// Info is one snapshot as found on the etcd nodes and in S3.
type Info struct {
	Name string `json:"name"`
	// Sidecar is the snapshot's sidecar (from a node, else from S3); nil
	// when it has none (a snapshot rigger did not take).
	Sidecar *Sidecar `json:"sidecar,omitempty"`
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

// Listing is what List found.
type Listing struct {
	// Snapshots sorted by time, then name.
	Snapshots []Info
	// Unlisted are the nodes (and S3) that could not be listed, with why.
	Unlisted []error
	// S3Err says why S3 could not be listed (it is in Unlisted too); nil
	// when it was, or was not asked.
	S3Err error
}

// List lists the snapshots under Dir on every etcd node
// of cluster.yml, and in S3 when withS3 and s3backupconfig are set.
func List(ctx context.Context, cl *Cluster, withS3 bool) (*Listing, error) {
	addrs := addresses(etcdNodes(cl.Desired))
	type nodeList struct {
		files    []dockerop.FileInfo
		sidecars map[string][]byte
		err      error
	}
	lists := make([]nodeList, len(addrs))
	_ = fanout.Each(ctx, addrs, cl.MaxParallel, func(ctx context.Context, i int, a string) error {
		l := &lists[i]
		e, err := cl.Engine(ctx, a)
		if err != nil {
			l.err = err
			return nil
		}
		if l.files, l.err = dockerop.ListDir(ctx, e, a, cl.HelperImage, Dir); l.err != nil {
			return nil
		}
		var want []string
		for _, f := range l.files {
			if strings.HasSuffix(f.Path, SidecarSuffix) {
				want = append(want, f.Path)
			}
		}
		l.sidecars, l.err = dockerop.ReadFiles(ctx, e, a, cl.HelperImage, want)
		return nil
	})

	out := &Listing{}
	byName := map[string]*Info{}
	get := func(name string) *Info {
		if si, ok := byName[name]; ok {
			return si
		}
		si := &Info{Name: name}
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
			if strings.HasSuffix(name, SidecarSuffix) || CheckName(name) != nil {
				continue
			}
			si := get(name)
			if si.Sidecar == nil {
				if b, ok := l.sidecars[f.Path+SidecarSuffix]; ok {
					if sc, err := ParseSidecar(b); err == nil && sc.Name == name {
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
	if cfg := cl.s3Config(); withS3 && cfg != nil {
		store, err := NewS3(cfg)
		var objs []Object
		if err == nil {
			objs, err = store.List(ctx)
		}
		if err != nil {
			out.S3Err = err
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
		} else if p, ok := ParseName(si.Name); ok {
			si.TakenAt = p.Time
		}
		slices.Sort(si.Nodes)
		slices.Sort(si.Damaged)
		out.Snapshots = append(out.Snapshots, *si)
	}
	slices.SortFunc(out.Snapshots, func(a, b Info) int {
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

// DeleteResult is what Delete removed.
type DeleteResult struct {
	// Deleted are the etcd nodes (and the S3 location) it was removed from.
	Deleted []string
}

// Delete removes the snapshot name and its sidecar from every etcd
// node of cluster.yml, and from S3 when withS3 (s3backupconfig must be
// set then). A snapshot found nowhere is an error; so is a node that does
// not answer (it may still hold it).
func Delete(ctx context.Context, cl *Cluster, name string, withS3 bool) (*DeleteResult, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	cfg := cl.s3Config()
	if withS3 && cfg == nil {
		return nil, errors.New("delete from s3: services.etcd.backup_config.s3backupconfig is not set in cluster.yml")
	}
	addrs := addresses(etcdNodes(cl.Desired))
	deleted := make([]bool, len(addrs))
	var errs []error
	if err := fanout.Each(ctx, addrs, cl.MaxParallel, func(ctx context.Context, i int, a string) error {
		e, err := cl.Engine(ctx, a)
		if err == nil {
			deleted[i], err = cl.deleteOn(ctx, e, a, name)
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", a, err)
		}
		return nil
	}); err != nil {
		errs = append(errs, err)
	}
	res := &DeleteResult{}
	for i, a := range addrs {
		if deleted[i] {
			res.Deleted = append(res.Deleted, a)
		}
	}
	if withS3 {
		store, err := NewS3(cfg)
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
func (cl *Cluster) deleteOn(ctx context.Context, e dockerop.Engine, node, name string) (bool, error) {
	found := false
	for _, f := range []string{name, name + SidecarSuffix} {
		_, err := dockerop.StatFile(ctx, e, node, cl.HelperImage, path.Join(Dir, f))
		if err == nil {
			found = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	if !found {
		return false, nil
	}
	return true, cl.removeSnapshotFiles(ctx, e, node, name)
}
