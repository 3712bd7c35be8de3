package etcdsnap

import (
	"context"
	"errors"
	"fmt"
	"strings"

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
	// FromNode, for a snapshot without a sidecar, is the etcd node whose
	// copy every member restores (--from-node); "" picks the first etcd
	// node of cluster.yml with a copy. Refused for a snapshot with one.
	FromNode string
}

// RestoreCheck is what the check before a restore found: the snapshot,
// verified on every etcd node.
type RestoreCheck struct {
	Name    string
	Sidecar *Sidecar
	// Source is set when the snapshot has no sidecar (Sidecar is nil: it
	// was taken without rigger, RKE's or by hand, and which cluster's CA
	// it belongs to cannot be checked): the etcd node whose copy every
	// member restores, verified by etcd's integrity hash. Size and SHA256
	// are that copy's, Status is its etcdctl snapshot status.
	Source string
	Size   int64
	SHA256 string
	Status Status
	// Files is node → the file its member is restored from: the
	// snapshot under Dir, or the source's copy fetched to FetchDir.
	Files map[string]string
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
// A snapshot with no sidecar anywhere (RKE's) is restored from one node's
// copy (o.FromNode's, else the first etcd node's in cluster.yml order that
// has one) once it passed etcd's integrity hash; it is fetched to FetchDir
// on the other nodes, whose own copies are left as they are, and removed
// there once restored. A copy may be RKE's zip file (<name>.zip, on a node
// without <name>): the source's is read through the node's Docker API,
// unzipped on this machine (bounded by MaxUnzippedSize, the zip checked to
// be one snapshot as rke-tools zips it), verified by etcd's integrity hash,
// and written to FetchDir on every node, the source too; the node's zip
// files are only read. name may be given as <name>.zip.
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
	// RKE's zip file <name>.zip is the snapshot <name>, as for rke etcd
	// snapshot-restore (rigger snapshot list shows the file's name).
	if base, ok := strings.CutSuffix(name, zipSuffix); ok && base != "" {
		name = base
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
	chk, err := cl.checkRestore(ctx, name, o.FromNode, members, progress)
	if err != nil {
		return nil, fmt.Errorf("restore snapshot %s refused, nothing was stopped: %w", name, err)
	}
	res := &RestoreResult{Check: chk, MovedAside: map[string]string{}}
	err = nil
	if o.Checked != nil {
		err = o.Checked(chk)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return res, errors.Join(err, cl.removeAllFetched(ctx, chk))
	}
	r := &restorer{cl: cl, name: name, chk: chk, members: members, progress: progress, res: res,
		stamp: cl.Now().UTC().Format("20060102T150405Z")}
	return res, r.run(ctx, phase, o.Hooks)
}
