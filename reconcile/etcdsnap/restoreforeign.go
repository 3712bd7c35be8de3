package etcdsnap

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"

	"github.com/rigger/rigger/reconcile/dockerop"
)

// The restore of a snapshot without a sidecar (one RKE took): one node's
// copy is the source of every member, verified by etcd's own integrity
// hash, and fetched to the other nodes beside their own copies.

// FetchDir is where a restore puts, on an etcd node, the copy of a
// snapshot without a sidecar that it fetched from another node: a
// directory of its own under Dir, so that the node's own file of that name
// stays as it is. A name starting with '.' is no snapshot name, so list,
// delete and retention never see it. The copy is removed once the node's
// member was restored from it, or when the restore stops before anything
// stopped; one that a failure left there is replaced by the next restore.
const FetchDir = Dir + "/.rigger-restore"

// fetchPath is where a fetched copy of the snapshot name goes.
func fetchPath(name string) string { return path.Join(FetchDir, name) }

// integrityError is a snapshot file whose end is not etcd's integrity hash
// of the rest.
type integrityError struct{ msg string }

func (e *integrityError) Error() string { return e.msg }

// verifyIntegrity reads a snapshot file of size bytes and checks etcd's
// integrity hash: `etcdctl snapshot save` appends the sha256 of the
// database, which makes the file's size 32 bytes past a multiple of 512,
// and `snapshot restore` checks it (go.etcd.io/etcd/etcdutl's
// copyAndVerifyDB). An error reading is returned as it is; a file that
// fails the check is an *integrityError.
func verifyIntegrity(r io.Reader, size int64) error {
	if size%512 != sha256.Size {
		return &integrityError{fmt.Sprintf("it is %d bytes, not 32 bytes past a multiple of 512: it does not end with the integrity hash "+
			"that etcdctl snapshot save appends (truncated, or not an etcd snapshot)", size)}
	}
	h := sha256.New()
	if _, err := io.CopyN(h, r, size-sha256.Size); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(r, want); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		return &integrityError{fmt.Sprintf("etcd's integrity hash at its end is %s, its data has sha256 %s", hex.EncodeToString(want), hex.EncodeToString(got))}
	}
	return nil
}

// checkIntegrity checks etcd's integrity hash of the node's copy of the
// snapshot name, read through the node's Docker API: hashErr when the copy
// fails it, err when it could not be read.
func (cl *Cluster) checkIntegrity(ctx context.Context, node, name string) (hashErr, err error) {
	e, err := cl.Engine(ctx, node)
	if err != nil {
		return nil, err
	}
	rc, size, err := dockerop.OpenFile(ctx, e, node, cl.HelperImage, path.Join(Dir, name))
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	err = verifyIntegrity(rc, size)
	if ie := (*integrityError)(nil); errors.As(err, &ie) {
		return err, nil
	}
	return nil, err
}

// fetchCopy streams the node from's copy of the snapshot name to node to,
// at fetchPath(name), and checks there that it has size bytes and sha256
// sum (the source's). A copy that does not is removed: only that file, the
// node's own copy of name is never written or removed.
func (cl *Cluster) fetchCopy(ctx context.Context, from, to, name string, size int64, sum string) error {
	src, err := cl.Engine(ctx, from)
	if err != nil {
		return err
	}
	dst, err := cl.Engine(ctx, to)
	if err != nil {
		return err
	}
	rc, n, err := dockerop.OpenFile(ctx, src, from, cl.HelperImage, path.Join(Dir, name))
	if err != nil {
		return err
	}
	defer rc.Close()
	if n != size {
		return fmt.Errorf("the copy on %s is %d bytes now, it was %d when checked", from, n, size)
	}
	file := fetchPath(name)
	removeBad := func(err error) error {
		return errors.Join(err, cl.removeFetched(context.WithoutCancel(ctx), to, name))
	}
	if err := dockerop.WriteStream(ctx, dst, to, cl.HelperImage, file, size, rc); err != nil {
		return removeBad(err)
	}
	got, err := cl.sha256On(ctx, dst, to, file)
	if err != nil {
		return removeBad(err)
	}
	if got != sum {
		return removeBad(fmt.Errorf("the copy has sha256 %s, the source's is %s: removed", got, sum))
	}
	return nil
}

// removeFetched removes the fetched copy of the snapshot name from the
// node, and FetchDir when nothing else is in it.
func (cl *Cluster) removeFetched(ctx context.Context, node, name string) error {
	e, err := cl.Engine(ctx, node)
	if err == nil {
		err = dockerop.Run(ctx, e, node, cl.HelperImage, []string{"sh", "-c", `rm -f "$1" && { rmdir "$2" 2>/dev/null || true; }`, "sh", fetchPath(name), FetchDir},
			[]string{Dir + ":" + Dir})
	}
	if err != nil {
		return fmt.Errorf("node %s: remove the fetched copy %s (remove it by hand): %w", node, fetchPath(name), err)
	}
	return nil
}

// removeAllFetched removes every copy the check fetched to FetchDir: the
// restore stopped before anything was stopped.
func (cl *Cluster) removeAllFetched(ctx context.Context, chk *RestoreCheck) error {
	var errs []error
	for _, m := range chk.Members {
		if chk.Files[m.Node] == fetchPath(chk.Name) {
			errs = append(errs, cl.removeFetched(context.WithoutCancel(ctx), m.Node, chk.Name))
		}
	}
	return errors.Join(errs...)
}
