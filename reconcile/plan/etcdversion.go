package plan

import (
	"fmt"
	"strings"

	"github.com/blang/semver"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/spec/rkemeta"
)

// etcdMinimumBefore is, for each etcd minor version, the patch release of
// the minor before it that every member must run before any member moves
// to it (etcd's upgrade guides): 3.5.1–3.5.25 keep a learner's promotion
// only in the v2 store, which 3.6 no longer reads, so a member that joined
// as a learner (as rigger adds members) would be a learner again after the
// upgrade; 3.7 needs 3.6.11's storage changes.
var etcdMinimumBefore = map[string]string{
	"3.6": "3.5.26",
	"3.7": "3.6.11",
}

// etcdVersion is the version an etcd image's tag names
// (rancher/mirrored-coreos-etcd:v3.5.16, registry.k8s.io/etcd:3.5.21-0),
// without its suffix; ok is false when the tag names none.
func etcdVersion(image string) (semver.Version, bool) {
	tag := strings.TrimPrefix(rkemeta.ImageTag(image), "v")
	tag, _, _ = strings.Cut(tag, "-")
	v, err := semver.Parse(tag)
	return v, err == nil
}

// EtcdVersionError refuses a plan that moves etcd to a version etcd does
// not upgrade to from what the members run.
type EtcdVersionError struct {
	// Node, Running and Wanted: the first member that cannot move, its
	// image and the one cluster.yml asks for.
	Node, Running, Wanted string
	// Why says what etcd requires, and what to do.
	Why string
}

func (e *EtcdVersionError) Error() string {
	return fmt.Sprintf("cluster.yml would move etcd on %s from %s to %s: %s", e.Node, e.Running, e.Wanted, e.Why)
}

// CheckEtcdUpgrade returns an *EtcdVersionError when d would run etcd on a
// node of o at a version etcd cannot move to from the one it runs there: an
// older minor version (etcd downgrades only through its downgrade API), a
// minor version skipped, or a new minor version before every member that
// answered runs the patch release it needs (etcdMinimumBefore). Images
// whose tag names no version are not compared. Like Compute, it is pure.
func CheckEtcdUpgrade(d *desired.Cluster, o *observe.Cluster) error {
	if o == nil {
		return nil
	}
	type member struct {
		node, image string
		v           semver.Version
	}
	var running []member
	for _, dn := range d.Nodes {
		on := o.Nodes[dn.Address]
		if on == nil || !on.Reachable {
			continue
		}
		if oc, ok := on.Containers[desired.Etcd]; ok {
			if v, ok := etcdVersion(oc.Image); ok {
				running = append(running, member{dn.Address, oc.Image, v})
			}
		}
	}
	for _, dn := range d.Nodes {
		dc, ok := dn.Container(desired.Etcd)
		if !ok {
			continue
		}
		w, ok := etcdVersion(dc.Image)
		if !ok {
			continue
		}
		for _, m := range running {
			r := m.v
			refuse := func(why string, args ...any) error {
				return &EtcdVersionError{Node: m.node, Running: m.image, Wanted: dc.Image, Why: fmt.Sprintf(why, args...)}
			}
			switch {
			case w.Major != r.Major:
				// No other major version exists to compare with.
			case w.Minor < r.Minor:
				return refuse("etcd does not move back to an older minor version in place. Keep system_images.etcd at %d.%d or later", r.Major, r.Minor)
			case w.Minor > r.Minor+1:
				return refuse("etcd upgrades one minor version at a time. Set system_images.etcd to the newest %d.%d patch release first, apply it, then go on", r.Major, r.Minor+1)
			case w.Minor == r.Minor+1:
				minimum := etcdMinimumBefore[fmt.Sprintf("%d.%d", w.Major, w.Minor)]
				if min, err := semver.Parse(minimum); err == nil && r.LT(min) {
					return refuse("etcd %d.%d needs every member on %s or later first (etcd's upgrade rule; 3.5.1–3.5.25 lose a learner's promotion in the upgrade to 3.6). "+
						"Set system_images.etcd to a %d.%d release at %s or later, apply it, then go on", w.Major, w.Minor, minimum, r.Major, r.Minor, minimum)
				}
			}
		}
	}
	return nil
}

// etcdSnapshotLogsBefore is, for each etcd minor version that cannot apply
// the entries of a log that older minor versions wrote, the minor version
// a member moves to it from, whose members must each save a snapshot of
// their log first (etcdmember.SnapshotLogs): 3.7 cannot apply the entries
// 3.5 wrote in v2's format, which a 3.6 member replays from its log until
// its first snapshot after them, and crash-loops.
var etcdSnapshotLogsBefore = map[string]string{"3.7": "3.6"}

// SnapshotEtcdLogs says which members must save a snapshot of their log
// before the plan moves any to a new etcd minor version.
type SnapshotEtcdLogs struct {
	// From is the minor version the members run ("3.6"), To the one the
	// plan moves them to ("3.7").
	From, To string
	// Nodes are the nodes whose member the plan moves, in cluster.yml
	// order.
	Nodes []string
}

// snapshotEtcdLogs is what the plan's members must do before d moves any
// of o's from one etcd minor version to the next (etcdSnapshotLogsBefore),
// nil when it moves none.
func snapshotEtcdLogs(d *desired.Cluster, o *observe.Cluster) *SnapshotEtcdLogs {
	var out *SnapshotEtcdLogs
	for _, dn := range d.Nodes {
		on := o.Nodes[dn.Address]
		dc, ok := dn.Container(desired.Etcd)
		if on == nil || !on.Reachable || !ok {
			continue
		}
		oc, ok := on.Containers[desired.Etcd]
		if !ok {
			continue
		}
		w, okw := etcdVersion(dc.Image)
		r, okr := etcdVersion(oc.Image)
		if !okw || !okr {
			continue
		}
		to, from := fmt.Sprintf("%d.%d", w.Major, w.Minor), fmt.Sprintf("%d.%d", r.Major, r.Minor)
		if etcdSnapshotLogsBefore[to] != from {
			continue
		}
		if out == nil {
			out = &SnapshotEtcdLogs{From: from, To: to}
		}
		out.Nodes = append(out.Nodes, dn.Address)
	}
	return out
}

// Describe says what the apply does, as Render prints it.
func (s *SnapshotEtcdLogs) Describe() string {
	return fmt.Sprintf("Before etcd %s: every etcd %s member saves a snapshot of its log (rigger writes until each has), "+
		"so that no entry etcd 3.5 wrote, which %s cannot apply, is left to replay when %s restart on %s.",
		s.To, s.From, s.To, strings.Join(s.Nodes, ", "), s.To)
}
