package etcdsnap

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/dockerop"
)

// RKE's snapshots are zip files: rke-tools' rke-etcd-backup saves
// /backup/<name> with etcdctl, zips it to /backup/<name>.zip (entry
// "/backup/<name>", deflated) together with /etc/kubernetes/<name>.rkestate
// when RKE put the cluster's state there (`rke etcd snapshot-save` does),
// and removes the file it zipped. A restore of such a snapshot reads the
// zip through the node's Docker API and unzips it on the machine rigger
// runs on; the node's zip file is only read.

// MaxUnzippedSize bounds the snapshot a zip file may hold (its entry's
// declared size, and what is read of it): 8 GiB, etcd's largest
// recommended backend quota. A zip that says or unpacks to more is refused,
// as is a zip file larger than that.
const MaxUnzippedSize int64 = 8 << 30

// zipError is a zip file that is not one snapshot as RKE zips it: refused
// like a copy that fails etcd's integrity hash.
type zipError = integrityError

// zipEntryNames are the names the snapshot name may have in its zip file:
// rke-tools' (/backup/<name>), Info-ZIP's of the same path (which drops
// the leading '/'), and a file zipped from its own directory.
func zipEntryNames(name string) []string {
	return []string{"/backup/" + name, "backup/" + name, name}
}

// zipStateNames are the names of RKE's cluster state beside the snapshot
// (<name>.rkestate from /etc/kubernetes): left unread, it holds the
// cluster's private keys.
func zipStateNames(name string) []string {
	return []string{"/etc/kubernetes/" + name + ".rkestate", "etc/kubernetes/" + name + ".rkestate"}
}

// snapshotEntry picks the entry of the snapshot name in a zip file: exactly
// one, of a name zipEntryNames allows, declared at most limit bytes, beside
// at most RKE's state file. Anything else is a *zipError that names it.
func snapshotEntry(zr *zip.Reader, name string, limit int64) (*zip.File, error) {
	var snap *zip.File
	for _, f := range zr.File {
		switch {
		case slices.Contains(zipEntryNames(name), f.Name) && !f.FileInfo().IsDir():
			if snap != nil {
				return nil, &zipError{fmt.Sprintf("the zip file holds the snapshot twice (%q and %q): zip %s alone again", snap.Name, f.Name, name)}
			}
			snap = f
		case slices.Contains(zipStateNames(name), f.Name):
		default:
			return nil, &zipError{fmt.Sprintf("the zip file holds %q, which is neither the snapshot (%s) nor RKE's cluster state (%s): "+
				"an RKE snapshot's zip holds only those; zip %s alone again", f.Name, strings.Join(zipEntryNames(name), ", "), zipStateNames(name)[0], name)}
		}
	}
	if snap == nil {
		return nil, &zipError{fmt.Sprintf("the zip file holds no snapshot named %s (as %s)", name, strings.Join(zipEntryNames(name), ", "))}
	}
	if snap.UncompressedSize64 > uint64(limit) {
		return nil, &zipError{fmt.Sprintf("its entry %q says it unpacks to %d bytes, more than rigger unzips (%d): "+
			"unzip it on the node yourself if it really is a snapshot", snap.Name, snap.UncompressedSize64, limit)}
	}
	return snap, nil
}

// unzipSnapshot reads the zip file zr (size bytes), finds the snapshot
// name in it (snapshotEntry), checks etcd's integrity hash of what it
// unpacks to and the zip's own CRC-32 and size, and writes it to w. It
// returns the snapshot's size and sha256. A zip that is not one snapshot
// within limit, or whose snapshot fails either check, is a *zipError
// (*integrityError); an error reading or writing is returned as it is.
func unzipSnapshot(zr io.ReaderAt, size int64, name string, limit int64, w io.Writer) (int64, string, error) {
	r, err := zip.NewReader(zr, size)
	if err != nil {
		return 0, "", &zipError{fmt.Sprintf("it is not a zip file that can be read (truncated?): %v", err)}
	}
	f, err := snapshotEntry(r, name, limit)
	if err != nil {
		return 0, "", err
	}
	rc, err := f.Open()
	if err != nil {
		return 0, "", &zipError{fmt.Sprintf("its entry %q cannot be unzipped: %v", f.Name, err)}
	}
	defer rc.Close()
	n := int64(f.UncompressedSize64)
	h := sha256.New()
	// archive/zip refuses more bytes than the entry declares (n, at most
	// limit) and checks its CRC-32 at the end: read to the end, one byte
	// past n at most.
	in := io.TeeReader(io.LimitReader(rc, n+1), io.MultiWriter(w, h))
	err = verifyIntegrity(in, n)
	if err == nil {
		var extra int64
		extra, err = io.Copy(io.Discard, in)
		if err == nil && extra > 0 {
			err = fmt.Errorf("%d bytes past its declared size", extra)
		}
	}
	if ie := (*integrityError)(nil); errors.As(err, &ie) {
		return 0, "", &zipError{fmt.Sprintf("what its entry %q unpacks to fails etcd's integrity check: %s", f.Name, ie.msg)}
	}
	if err != nil {
		if errors.Is(err, zip.ErrChecksum) || errors.Is(err, zip.ErrFormat) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return 0, "", &zipError{fmt.Sprintf("its entry %q is damaged: %v", f.Name, err)}
		}
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// unzipped is a snapshot unzipped from a node's zip file, in a temporary
// file on the machine rigger runs on.
type unzipped struct {
	File   string
	Size   int64
	SHA256 string
}

// unzipCopy reads the node's zip file of the snapshot name (Dir/name.zip,
// through its Docker API: the file is only read) into a temporary file
// here, and unzips the snapshot from it (unzipSnapshot) into another one,
// which the caller removes. hashErr is set when the zip is refused, err
// when it could not be read or written.
func (cl *Cluster) unzipCopy(ctx context.Context, node, name string) (u *unzipped, hashErr, err error) {
	e, err := cl.Engine(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	file := path.Join(Dir, name+zipSuffix)
	rc, size, err := dockerop.OpenFile(ctx, e, node, cl.HelperImage, file)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	if size > MaxUnzippedSize {
		return nil, &zipError{fmt.Sprintf("it is %d bytes, more than rigger unzips (%d)", size, MaxUnzippedSize)}, nil
	}
	zf, err := os.CreateTemp("", "rigger-restore-*.zip")
	if err != nil {
		return nil, nil, fmt.Errorf("unzip %s: %w", file, err)
	}
	defer func() { zf.Close(); os.Remove(zf.Name()) }()
	if _, err := io.Copy(zf, io.LimitReader(rc, size)); err != nil {
		return nil, nil, fmt.Errorf("read %s from node %s: %w", file, node, err)
	}
	out, err := os.CreateTemp("", "rigger-restore-"+name+"-*")
	if err != nil {
		return nil, nil, fmt.Errorf("unzip %s: %w", file, err)
	}
	n, sum, err := unzipSnapshot(zf, size, name, MaxUnzippedSize, out)
	if cerr := out.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out.Name())
		if ie := (*integrityError)(nil); errors.As(err, &ie) {
			return nil, err, nil
		}
		return nil, nil, fmt.Errorf("unzip %s to %s: %w", file, out.Name(), err)
	}
	return &unzipped{File: out.Name(), Size: n, SHA256: sum}, nil, nil
}

// fetchUnzipped writes the snapshot unzipped here (u) to node to, at
// fetchPath(name), and checks its sha256 there; a copy that does not match
// is removed.
func (cl *Cluster) fetchUnzipped(ctx context.Context, u *unzipped, to, name string) error {
	dst, err := cl.Engine(ctx, to)
	if err != nil {
		return err
	}
	f, err := os.Open(u.File)
	if err != nil {
		return err
	}
	defer f.Close()
	file := fetchPath(name)
	removeBad := func(err error) error {
		return errors.Join(err, cl.removeFetched(context.WithoutCancel(ctx), to, name))
	}
	if err := dockerop.WriteStream(ctx, dst, to, cl.HelperImage, file, u.Size, f); err != nil {
		return removeBad(err)
	}
	got, err := cl.sha256On(ctx, dst, to, file)
	if err != nil {
		return removeBad(err)
	}
	if got != u.SHA256 {
		return removeBad(fmt.Errorf("the copy has sha256 %s, the unzipped snapshot's is %s: removed", got, u.SHA256))
	}
	return nil
}
