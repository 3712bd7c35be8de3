package etcdsnap

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Where snapshots live on the etcd nodes, as in RKE.
const (
	// Dir holds the snapshots and their sidecars on every etcd node.
	Dir = "/opt/rke/etcd-snapshots"
	// SidecarSuffix is appended to a snapshot's name for its sidecar.
	SidecarSuffix = ".json"
	// MaxNameLength bounds a snapshot name.
	MaxNameLength = 200
)

// The names RKE gives snapshots (rigger gives the same), around a time
// stamp: RKE's scheduled snapshots (rke-tools' etcd-rolling-snapshots) are
// <stamp>_etcd, and `rke etcd snapshot-save` without --name names one
// rke_etcd_snapshot_<stamp>. RKE writes them as zip files, <name>.zip.
const (
	scheduledSuffix = "_etcd"
	unnamedPrefix   = "rke_etcd_snapshot_"
	zipSuffix       = ".zip"
	// oldPrefix started the names earlier rigger releases gave:
	// rigger-<cluster>-<oldLayout>-<hostname>.
	oldPrefix = "rigger-"
	oldLayout = "20060102T150405Z"
)

// Kinds of snapshot.
const (
	KindManual    = "manual"
	KindScheduled = "scheduled"
	// KindBeforeChange is taken by apply before it changes etcd's
	// membership or replaces a member; kept like manual ones.
	KindBeforeChange = "before-change"
)

// nameRE is what a snapshot name may be: a file name, and an S3 key part,
// of letters, digits, '.', '_', '-', and the ':' and '+' of the time
// stamps in RKE's names (2026-11-22T01:30:00+01:00).
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+-]*$`)

// CheckName says why name cannot name a snapshot, or nil.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a snapshot name cannot be empty")
	case len(name) > MaxNameLength:
		return fmt.Errorf("snapshot name %.20q… is longer than %d characters", name, MaxNameLength)
	case !nameRE.MatchString(name):
		return fmt.Errorf("snapshot name %q: use letters, digits, '.', '_', '-', ':' and '+' only, starting with a letter or digit", name)
	case strings.HasSuffix(name, SidecarSuffix), strings.HasSuffix(name, ".part"):
		return fmt.Errorf("snapshot name %q: must not end in %s or .part (rigger's own files)", name, SidecarSuffix)
	}
	return nil
}

// Name is the name rigger gives a snapshot of kind taken at t when it is
// given none, RKE's: <stamp>_etcd for a scheduled one, as RKE's
// etcd-rolling-snapshots names them, and rke_etcd_snapshot_<stamp> for any
// other, as `rke etcd snapshot-save` without --name does. The stamp is t in
// UTC, RFC 3339 (2026-11-22T01:30:00Z); with safe (backup_config's
// safe_timestamp) its ':' are '-' (2026-11-22T01-30-00Z), the rule Rancher
// applies to the names it gives when it drives RKE (RKE's own CLI ignores
// safe_timestamp).
func Name(kind string, t time.Time, safe bool) string {
	stamp := t.UTC().Format(time.RFC3339)
	if safe {
		stamp = strings.ReplaceAll(stamp, ":", "-")
	}
	if kind == KindScheduled {
		return stamp + scheduledSuffix
	}
	return unnamedPrefix + stamp
}

// ParsedName is what a snapshot's name says of it.
type ParsedName struct {
	// Time is the time stamp in the name.
	Time time.Time
	// Scheduled says the name is one of RKE's (and rigger's) scheduled
	// snapshots: <stamp>_etcd.
	Scheduled bool
}

// ParseName reads the time of a snapshot from its name, for a snapshot
// without a sidecar (RKE's, or one rigger did not finish). It reads the
// names Name gives, and those RKE gives, with and without safe_timestamp
// and with the .zip of RKE's files:
//
//   - <stamp>_etcd[.zip]: scheduled (rke-tools reads the stamp before the
//     first '_' when it applies retention);
//   - <name>_<stamp>[.zip]: `rke etcd snapshot-save` without --name
//     (rke_etcd_snapshot_<stamp>, in the local time of where RKE ran), and
//     the snapshots Rancher names (c-xxxxx-rl-xxxxx_<stamp>);
//   - rigger-<cluster>-<20261122T013000Z>-<hostname>: earlier rigger
//     releases.
//
// The stamp is RFC 3339, or RFC 3339 whose ':' are '-' (safe_timestamp).
// It reports false for any other name (one a user chose).
func ParseName(name string) (ParsedName, bool) {
	if CheckName(name) != nil {
		return ParsedName{}, false
	}
	base := strings.TrimSuffix(name, zipSuffix)
	if stamp, ok := strings.CutSuffix(base, scheduledSuffix); ok {
		if t, ok := parseStamp(stamp); ok {
			return ParsedName{Time: t, Scheduled: true}, true
		}
	}
	if i := strings.LastIndexByte(base, '_'); i > 0 {
		if t, ok := parseStamp(base[i+1:]); ok {
			return ParsedName{Time: t}, true
		}
	}
	if t, ok := parseOldName(name); ok {
		return ParsedName{Time: t}, true
	}
	return ParsedName{}, false
}

// parseStamp reads an RFC 3339 time, or one whose ':' are '-'
// (safe_timestamp: 2026-11-22T01-30-00Z, 2026-11-22T02-30-00+01-00).
func parseStamp(s string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, true
	}
	date, clock, ok := strings.Cut(s, "T")
	if !ok || strings.Contains(clock, ":") {
		return time.Time{}, false
	}
	// The clock's '-' are ':' but for a negative offset's sign, the
	// sixth character from the end (-05-00).
	b := []byte(clock)
	for i, c := range b {
		if c == '-' && !(i == len(b)-6 && !strings.HasSuffix(clock, "Z")) {
			b[i] = ':'
		}
	}
	t, err := time.Parse(time.RFC3339, date+"T"+string(b))
	return t, err == nil
}

// oldTimeRE finds the time of a name earlier rigger releases gave.
var oldTimeRE = regexp.MustCompile(`-(\d{8}T\d{6}Z)-`)

// parseOldName reads the time of rigger-<cluster>-<time>-<hostname>, the
// last time-shaped part (a cluster name may hold one too).
func parseOldName(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, oldPrefix)
	if !ok {
		return time.Time{}, false
	}
	locs := oldTimeRE.FindAllStringSubmatchIndex(rest, -1)
	if len(locs) == 0 {
		return time.Time{}, false
	}
	l := locs[len(locs)-1]
	if l[0] == 0 || l[1] == len(rest) {
		return time.Time{}, false // no cluster or no hostname
	}
	t, err := time.Parse(oldLayout, rest[l[2]:l[3]])
	return t, err == nil
}
