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
	// namePrefix starts the names rigger gives.
	namePrefix = "rigger-"
	// timeLayout is the UTC time in a name: ISO 8601 basic format, no
	// colons (safe on every filesystem and in S3 keys), sorts by time.
	timeLayout = "20060102T150405Z"
	// MaxNameLength bounds a snapshot name.
	MaxNameLength = 200
)

// Kinds of snapshot.
const (
	KindManual    = "manual"
	KindScheduled = "scheduled"
	// KindBeforeChange is taken by apply before it changes etcd's
	// membership or replaces a member; kept like manual ones.
	KindBeforeChange = "before-change"
)

// nameRE is what a snapshot name may be: a file name and an S3 key part
// that needs no quoting anywhere.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckName says why name cannot name a snapshot, or nil.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a snapshot name cannot be empty")
	case len(name) > MaxNameLength:
		return fmt.Errorf("snapshot name %.20q… is longer than %d characters", name, MaxNameLength)
	case !nameRE.MatchString(name):
		return fmt.Errorf("snapshot name %q: use letters, digits, '.', '_' and '-' only, starting with a letter or digit", name)
	case strings.HasSuffix(name, SidecarSuffix), strings.HasSuffix(name, ".part"):
		return fmt.Errorf("snapshot name %q: must not end in %s or .part (rigger's own files)", name, SidecarSuffix)
	}
	return nil
}

// Name is the name rigger gives a snapshot of cluster taken at t on the
// node with hostname: rigger-<cluster>-<UTC time>-<hostname>. The names of
// one cluster sort by time. Characters a name cannot hold become '-'.
func Name(cluster string, t time.Time, hostname string) string {
	return namePrefix + sanitize(cluster) + "-" + t.UTC().Format(timeLayout) + "-" + sanitize(hostname)
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) == 0 {
		return "unnamed"
	}
	return string(b)
}

// timeRE finds the time of a name rigger gave.
var timeRE = regexp.MustCompile(`-(\d{8}T\d{6}Z)-`)

// ParsedName is what a name rigger gave says.
type ParsedName struct {
	Cluster  string
	Time     time.Time
	Hostname string
}

// ParseName reads a name made by Name. It reports false for any other
// name (one a user chose, or RKE's).
func ParseName(name string) (ParsedName, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok || CheckName(name) != nil {
		return ParsedName{}, false
	}
	// The last time-shaped part: a cluster name may hold one too.
	locs := timeRE.FindAllStringSubmatchIndex(rest, -1)
	if len(locs) == 0 {
		return ParsedName{}, false
	}
	l := locs[len(locs)-1]
	t, err := time.Parse(timeLayout, rest[l[2]:l[3]])
	if err != nil {
		return ParsedName{}, false
	}
	p := ParsedName{Cluster: rest[:l[0]], Time: t, Hostname: rest[l[1]:]}
	if p.Cluster == "" || p.Hostname == "" {
		return ParsedName{}, false
	}
	return p, true
}
