package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/storedapi"
	"github.com/rigger/rigger/spec/rkemeta"
)

// UpgradeMinors are the Kubernetes minor versions an upgrade of d goes
// from (the oldest that an API server of o runs) and to (the newest d's
// API servers run); ok is false when d upgrades no API server's minor.
func UpgradeMinors(d *desired.Cluster, o *observe.Cluster) (from, to int, ok bool) {
	from, to = -1, -1
	for _, dn := range d.Nodes {
		dc, ok := dn.Container(desired.KubeAPIServer)
		if !ok {
			continue
		}
		to = max(to, minorOf(rkemeta.ImageTag(dc.Image)))
		if on := o.Nodes[dn.Address]; on != nil && on.Reachable {
			if oc, running := on.Containers[desired.KubeAPIServer]; running {
				if m := minorOf(rkemeta.ImageTag(oc.Image)); m >= 0 && (from < 0 || m < from) {
					from = m
				}
			}
		}
	}
	return from, to, from >= 0 && to > from
}

// WriteAgain is a resource of which etcd stores objects at an API
// version that the minor an upgrade goes to no longer serves, and which
// the running API servers serve at At. After the upgrade's snapshot and
// before anything changes, the apply writes every object of it again,
// unchanged, through At (storedapi.WriteAgain), so that the API servers
// store each one at its resource's storage version, which the new minor
// reads: Kubernetes' storage version migration, as
// kube-storage-version-migrator does it.
type WriteAgain struct {
	// Resource is the resource as GroupResource names it
	// (ipaddresses.networking.k8s.io).
	Resource string `json:"resource"`
	// At is the API version it is written through.
	At string `json:"at"`
	// Stored are the API versions the upgrade takes away that its listed
	// objects are stored at, and Objects how many were listed (the scan
	// lists at most storedapi.MaxListed; the write covers them all).
	Stored  []string `json:"stored"`
	Objects int      `json:"objects"`
}

// writeAgain are the resources of f to write again before the upgrade, in
// f.Resources' order; none unless every resource found is served
// (otherwise CheckStoredAPIs refuses the upgrade).
func writeAgain(f *storedapi.Found) []WriteAgain {
	if f == nil || !f.Writable() {
		return nil
	}
	var out []WriteAgain
	for _, r := range f.Resources {
		w := WriteAgain{Resource: r, At: f.WriteAt[r]}
		for _, o := range f.Objects {
			if o.API.GroupResource() != r {
				continue
			}
			w.Objects++
			if v := o.API.GroupVersion(); !slices.Contains(w.Stored, v) {
				w.Stored = append(w.Stored, v)
			}
		}
		out = append(out, w)
	}
	return out
}

// DescribeWriteAgain says what the plan writes again before its upgrade,
// as Render prints it; empty when nothing.
func (p *Plan) DescribeWriteAgain() string {
	if len(p.WriteAgain) == 0 || p.Upgrade == nil {
		return ""
	}
	var each []string
	for _, w := range p.WriteAgain {
		stored := fmt.Sprintf("%d stored at %s", w.Objects, strings.Join(w.Stored, ", "))
		if w.Objects == 0 {
			stored = fmt.Sprintf("beyond the %d objects the scan lists", storedapi.MaxListed)
		}
		each = append(each, fmt.Sprintf("%s (%s) through %s", w.Resource, stored, w.At))
	}
	return fmt.Sprintf("Before the upgrade, after its snapshot: every object of %s written again, unchanged, so that the API servers store it "+
		"at its resource's storage version, which %s reads (storage version migration).", strings.Join(each, "; "), p.Upgrade.To)
}

// StoredAPIError refuses an upgrade to a Kubernetes minor version that no
// longer serves an API version etcd still stores objects at, when the
// running API servers serve no version of their resource either: they
// cannot be written again through the API, and the upgraded API servers
// could not read them.
type StoredAPIError struct {
	Found *storedapi.Found
	// Objects are those of the resources not served (Found.Unwritable).
	Objects []storedapi.Object
}

func (e *StoredAPIError) Error() string {
	var each []string
	for _, o := range e.Objects {
		name := o.Name
		if o.Namespace != "" {
			name = o.Namespace + "/" + o.Name
		}
		s := fmt.Sprintf("%s %s stored at %s, not served from 1.%d", o.API.GroupResource(), name, o.API.GroupVersion(), o.API.Removed)
		if o.API.Replacement != "" {
			s += " (use " + o.API.Replacement + ")"
		}
		each = append(each, s+", etcd key "+o.Key)
	}
	if e.Found.More > 0 {
		each = append(each, fmt.Sprintf("and up to %d more", e.Found.More))
	}
	return fmt.Sprintf("cluster.yml upgrades Kubernetes from 1.%d to 1.%d, which no longer serves API versions etcd stores objects at, "+
		"and the API servers of 1.%d serve no version of their resources, so rigger cannot write them again: %s. "+
		"The API servers could not read them after the upgrade. Delete each one (etcdctl del KEY), "+
		"or have the API servers serve a version of its resource (kube-api extra_args runtime-config), so that rigger writes it again; then apply again",
		e.Found.From, e.Found.To, e.Found.From, strings.Join(each, "; "))
}

// CheckStoredAPIs returns a *StoredAPIError when o found objects stored
// at API versions the upgrade it was read for takes away
// (observe.Cluster.StoredAPIs) whose resource the running API servers do
// not serve, an error when etcd could not be read to find out; nil
// otherwise (the objects of served resources are written again:
// WriteAgain). Like Compute, it is pure.
func CheckStoredAPIs(o *observe.Cluster) error {
	if o == nil || o.StoredAPIs == nil {
		return nil
	}
	if o.StoredAPIsErr != nil {
		return fmt.Errorf("cluster.yml upgrades Kubernetes from 1.%d to 1.%d, and the objects etcd stores at API versions 1.%d no longer serves could not be looked for: %w; apply again once etcd and the API servers answer",
			o.StoredAPIs.From, o.StoredAPIs.To, o.StoredAPIs.To, o.StoredAPIsErr)
	}
	if o.StoredAPIs.Writable() {
		return nil
	}
	return &StoredAPIError{Found: o.StoredAPIs, Objects: o.StoredAPIs.Unwritable()}
}

// StoredAPIWarnings says, when o found values of the resources an upgrade
// takes API versions away from encrypted at rest, that their versions
// could not be read: the upgrade is not refused for them, and the person
// who reads the plan is told which to write again first.
func StoredAPIWarnings(o *observe.Cluster) []string {
	if o == nil || o.StoredAPIs == nil || o.StoredAPIs.Encrypted == 0 {
		return nil
	}
	f := o.StoredAPIs
	return []string{fmt.Sprintf("cluster.yml upgrades Kubernetes from 1.%d to 1.%d: %d values of %s are encrypted at rest, and rigger "+
		"could not read the API version each was stored at, to check that 1.%d still serves it: write them again while 1.%d runs "+
		"(kubectl get RESOURCE -A -o json | kubectl replace -f -), so that the API server stores them at their resource's storage version",
		f.From, f.To, f.Encrypted, strings.Join(f.EncryptedResources, ", "), f.To, f.From)}
}
