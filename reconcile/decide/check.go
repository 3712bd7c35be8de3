package decide

import (
	"context"

	"github.com/rigger/rigger/internal/nodebin"
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
)

// CheckSpec makes the refusals of a plan that follow from cluster.yml alone,
// so that they are made before any connection: the component containers
// (desired.Build), the configuration files of a controlplane node and of
// another (desired.ConfigFiles), the system add-ons (sysaddons.Render) and
// the inline add-ons. `rigger validate` and every command that loads
// cluster.yml run it after spec.Load; c must be as spec.Load returns it
// without errors. file names cluster.yml in the diagnostics: errors, and a
// warning when the scheduled snapshots cluster.yml asks of the etcd nodes
// need this rigger's own binary and it cannot run there (nodebin); nil
// when there is nothing to say.
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
	if desired.SnapshotsOnNodes(c) && desired.RiggerImage(c) == "" {
		if _, err := nodebin.Get(); err != nil {
			diags = append(diags, spec.Diagnostic{Severity: spec.SeverityWarning, File: file, Path: "rigger.image",
				Summary: "the etcd nodes' etcd-rolling-snapshots containers (services.etcd.snapshot) cannot be created: they run this rigger's own binary in system_images.alpine, and " + err.Error(),
				Detail:  "Run a static rigger (make build), set rigger.image to rigger's image (rigger/rigger:<version>, `make image` builds it) where the nodes can pull it, or services.etcd.snapshot: false to leave the scheduled snapshots to `rigger serve`."})
		}
	}
	return diags
}
