package plan

import (
	"fmt"
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

// StoredAPIError refuses an upgrade to a Kubernetes minor version that no
// longer serves an API version etcd still stores objects at: after the
// upgrade the API servers could not read them.
type StoredAPIError struct {
	Found *storedapi.Found
}

func (e *StoredAPIError) Error() string {
	var each []string
	for _, o := range e.Found.Objects {
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
		each = append(each, fmt.Sprintf("and %d more", e.Found.More))
	}
	return fmt.Sprintf("cluster.yml upgrades Kubernetes from 1.%d to 1.%d, which no longer serves API versions etcd stores objects at: %s. "+
		"The API servers could not read them after the upgrade. Write each one again while 1.%d runs, so that the API server stores it at "+
		"its resource's storage version (kubectl get RESOURCE NAME -o json | kubectl replace -f -), or delete it, "+
		"with etcdctl del KEY where no API version of its resource is served; then apply again",
		e.Found.From, e.Found.To, strings.Join(each, "; "), e.Found.From)
}

// CheckStoredAPIs returns a *StoredAPIError when o found objects stored
// at API versions the upgrade it was read for takes away
// (observe.Cluster.StoredAPIs), an error when etcd could not be read to
// find out; nil otherwise. Like Compute, it is pure.
func CheckStoredAPIs(o *observe.Cluster) error {
	if o == nil || o.StoredAPIs == nil {
		return nil
	}
	if o.StoredAPIsErr != nil {
		return fmt.Errorf("cluster.yml upgrades Kubernetes from 1.%d to 1.%d, and etcd could not be read for objects stored at API versions 1.%d no longer serves: %w; apply again once etcd answers",
			o.StoredAPIs.From, o.StoredAPIs.To, o.StoredAPIs.To, o.StoredAPIsErr)
	}
	if len(o.StoredAPIs.Objects) == 0 {
		return nil
	}
	return &StoredAPIError{Found: o.StoredAPIs}
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
