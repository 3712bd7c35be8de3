package plan

import (
	"strings"

	"github.com/rigger/rigger/reconcile/desired"
)

// adoptPrefix starts the reason of every step that takes a container over
// from RKE (observe.Container.RKE).
const adoptPrefix = "adopt: "

// adoptReason is why RKE's container of a component rigger runs is
// replaced: rigger's takes its place under the same name, in the
// component's phase (so etcd members one at a time, keeping their data
// directory and member name; control-plane nodes one at a time; workers in
// batches).
func adoptReason(component string) string {
	r := adoptPrefix + "replace RKE's " + component + " with rigger's"
	if component == desired.Etcd {
		r += " (same member, data directory and certificates: it rejoins as itself)"
	}
	return r
}

// adoptRemoveReason is why a container RKE left that rigger has no
// counterpart of is removed.
func adoptRemoveReason(name string) string {
	switch {
	case name == "etcd-rolling-snapshots":
		return adoptPrefix + "remove RKE's snapshot schedule, as cluster.yml turns the nodes' off (services.etcd.snapshot: false, or backup_config.enabled: false); those RKE took stay on the node"
	case strings.HasPrefix(name, "etcd-") || name == "extract-statefile-configmap":
		return adoptPrefix + "remove RKE's one-shot " + name + " left by an earlier rke run"
	}
	return adoptPrefix + "remove RKE's " + name + " (a one-shot container of rke up, left behind)"
}
