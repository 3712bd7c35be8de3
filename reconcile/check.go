package reconcile

import (
	"context"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
)

// CheckSpec makes the refusals of Plan that follow from cluster.yml alone,
// so that they are made before any connection: the component containers
// (desired.Build), the configuration files of a controlplane node and of
// another (desired.ConfigFiles), the system add-ons (sysaddons.Render) and
// the inline add-ons. `rigger validate` and every command that loads
// cluster.yml run it after spec.Load; c must be as spec.Load returns it
// without errors. file names cluster.yml in the diagnostics: errors, and a
// warning when the scheduled snapshots cluster.yml asks of the etcd nodes
// have no image to run (rigger.image); nil when there is nothing to say.
func CheckSpec(c *spec.Cluster, file string) spec.Diagnostics {
	var errs []error
	if d, err := desired.Build(c); err != nil {
		errs = append(errs, err)
	} else {
		seen := map[bool]bool{}
		for i := range d.Nodes {
			n := &d.Nodes[i]
			control := n.HasRole(spec.RoleControlPlane)
			if seen[control] {
				continue
			}
			seen[control] = true
			if _, err := desired.ConfigFiles(c, n); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if _, err := sysaddons.Render(c); err != nil {
		errs = append(errs, err)
	}
	// Only the inline add-ons: reading addons_include is I/O.
	if _, err := (addons.Fetcher{}).UserAddons(context.Background(), addons.UserInput{Addons: c.Addons}); err != nil {
		errs = append(errs, err)
	}
	var diags spec.Diagnostics
	for _, err := range errs {
		diags = append(diags, spec.Diagnostic{Severity: spec.SeverityError, File: file, Summary: err.Error()})
	}
	if desired.SnapshotsWanted(c) && desired.RiggerImage(c) == "" {
		diags = append(diags, spec.Diagnostic{Severity: spec.SeverityWarning, File: file, Path: "rigger.image",
			Summary: "the etcd nodes take no scheduled snapshots (services.etcd.snapshot): their etcd-rolling-snapshots container runs rigger's image, which is not set, and RKE's rke-tools cannot run it; only `rigger serve` takes them",
			Detail:  "Set rigger.image to rigger's image (rigger/rigger:<version>, `make image` builds it) where the nodes can pull it, or services.etcd.snapshot: false to say that rigger serve takes them."})
	}
	return diags
}
