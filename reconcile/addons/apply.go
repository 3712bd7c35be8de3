package addons

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/rigger/rigger/reconcile/fanout"
)

var namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// Plan reports what Apply(ctx, addons) would do, changing nothing: every
// object is applied as a server-side dry run and compared with the live
// one (see the package documentation), and the objects Apply would prune
// are listed. It is also how drift is found: an object someone changed in
// the cluster is Configure.
//
// An object whose kind a CRD of addons defines, or whose Namespace addons
// creates, cannot be dry-run before those exist: it is Create, with a
// Summary that says why it was not checked. An object the API server
// rejects is an *ApplyError with DryRun set; when several fail, the error
// is the first one's in the add-ons' order.
//
// The dry runs change nothing, so they do not wait for each other:
// planParallel objects (and add-ons' prunes) are planned at once.
func (e *Engine) Plan(ctx context.Context, addons []Addon) (*ChangeSet, error) {
	set, err := e.resolve(ctx, addons)
	if err != nil {
		return nil, err
	}
	nsExists, err := e.namespacesExist(ctx, set)
	if err != nil {
		return nil, err
	}
	// results[i] are add-on i's objects' changes, in order, then its
	// prune's.
	type result struct {
		changes []Change
		err     error
	}
	results := make([][]result, len(set.addons))
	var jobs []func(context.Context)
	for i := range set.addons {
		ra := &set.addons[i]
		res := make([]result, len(ra.targets)+1)
		results[i] = res
		for j, t := range ra.targets {
			jobs = append(jobs, func(ctx context.Context) {
				ch, err := e.planObject(ctx, set, t, nsExists)
				res[j] = result{[]Change{ch}, err}
			})
		}
		jobs = append(jobs, func(ctx context.Context) {
			inv, err := e.readInventory(ctx, ra.name)
			if err == nil {
				res[len(ra.targets)].changes, _, err = e.prune(ctx, ra.name, inv.refs, set.owner, false, false)
			}
			res[len(ra.targets)].err = err
		})
	}
	if err := fanout.Each(ctx, jobs, planParallel, func(ctx context.Context, _ int, job func(context.Context)) error {
		job(ctx)
		return nil
	}); err != nil {
		return nil, err // ctx ended before every job started
	}
	cs := &ChangeSet{}
	for i, ra := range set.addons {
		ac := AddonChanges{Name: ra.name}
		for _, r := range results[i] {
			if r.err != nil {
				return nil, r.err
			}
			ac.Changes = append(ac.Changes, r.changes...)
		}
		cs.Addons = append(cs.Addons, ac)
	}
	return cs, nil
}

// planParallel is how many objects (or add-ons' prunes) Plan plans at
// once. One at a time, a plan waits out every slow answer in turn: right
// after an etcd member goes away, each resource type's first call stalls
// about 10 s in the API server until its etcd client gives that member
// up, and a plan of the system add-ons waited a minute.
const planParallel = 8

// namespacesExist says, for each Namespace the add-ons create, whether it
// exists: the objects in one that does not are not dry-run.
func (e *Engine) namespacesExist(ctx context.Context, set *desiredSet) (map[string]bool, error) {
	exists := map[string]bool{}
	for _, ns := range slices.Sorted(maps.Keys(set.namespaces)) {
		live, err := e.get(ctx, namespaces, ObjectRef{Version: "v1", Kind: "Namespace", Name: ns})
		if err != nil {
			return nil, err
		}
		exists[ns] = live != nil
	}
	return exists, nil
}

// planObject dry-runs one object and classifies it. nsExists is
// namespacesExist's answer.
func (e *Engine) planObject(ctx context.Context, set *desiredSet, t *target, nsExists map[string]bool) (Change, error) {
	notChecked := func(why string) Change {
		return Change{Object: t.ref, Action: Create, Source: t.src.String(), Summary: "not dry-run: " + why}
	}
	if t.pendingCRD {
		return notChecked("its CustomResourceDefinition is created first"), nil
	}
	if ns := t.ref.Namespace; ns != "" && set.namespaces[ns] && !nsExists[ns] {
		return notChecked("its Namespace is created first"), nil
	}
	live, err := e.get(ctx, t.gvr, t.ref)
	if err != nil {
		return Change{}, fmt.Errorf("addon %s: %w", t.addon, err)
	}
	after, err := e.apply(ctx, t, true)
	if t.recreate && immutable(err) {
		return Change{Object: t.ref, Action: Configure, Source: t.src.String(), Summary: "deleted and created again: " + apiMessage(err)}, nil
	}
	if err != nil {
		return Change{}, err
	}
	return classify(t, live, after), nil
}

// immutable reports whether err is the API server refusing a change of a
// field that cannot change.
func immutable(err error) bool {
	var ae *ApplyError
	return errors.As(err, &ae) && apierrors.IsInvalid(ae.Err) && strings.Contains(ae.Err.Error(), "immutable")
}

// Apply applies addons to the cluster, one add-on after the other in the
// order given, and returns what it did (as much as it did when it fails).
// For each add-on it:
//
//  1. records in the add-on's inventory the objects it is about to apply
//     (with those recorded before), so that nothing it creates is
//     untracked if it stops half-way;
//  2. applies the CRDs and Namespaces, waits for the CRDs to be
//     Established and reloads the kinds the cluster serves;
//  3. applies the other objects by kind (see the package documentation);
//  4. waits until every object is ready (kstatus Current), and with
//     Addon.NodeReady until every Node whose kubelet reports is, while
//     the wait makes progress (Options.ReadyTimeout from the last):
//     a *NotReadyError otherwise;
//  5. prunes (Options.Prune) the objects of its inventory that are in no
//     add-on of addons, when they still carry the add-on's label and
//     rigger's field manager; and
//  6. records the add-on's objects as its inventory.
//
// An object the API server rejects is an *ApplyError. Apply never removes
// an add-on that is not in addons: see Remove.
func (e *Engine) Apply(ctx context.Context, addons []Addon) (*ChangeSet, error) {
	return e.applyAll(ctx, addons, true)
}

// Stage applies addons as Apply does up to step 3 and records their
// objects in their inventories, but neither waits for them to be ready
// nor prunes: for an add-on that must be in the cluster before what makes
// it ready exists (the network plugin, before the kubelets whose Nodes it
// makes Ready). A later Apply waits and prunes.
func (e *Engine) Stage(ctx context.Context, addons []Addon) (*ChangeSet, error) {
	return e.applyAll(ctx, addons, false)
}

func (e *Engine) applyAll(ctx context.Context, addons []Addon, full bool) (*ChangeSet, error) {
	cs := &ChangeSet{}
	set, err := e.resolve(ctx, addons)
	if err != nil {
		return cs, err
	}
	for i := 0; i < len(set.addons); {
		if err := ctx.Err(); err != nil {
			return cs, err
		}
		n := 1 // a run of Concurrent add-ons goes at once
		for full && set.addons[i].concurrent && i+n < len(set.addons) && set.addons[i+n].concurrent {
			n++
		}
		acs, err := e.applyRun(ctx, set, set.addons[i:i+n], full)
		cs.Addons = append(cs.Addons, acs...)
		if err != nil {
			return cs, err
		}
		i += n
	}
	return cs, nil
}

// applyRun applies the add-ons of run one after the other (Apply's steps
// 1 to 3), then, when full, waits for them, prunes and records them, all
// at once (steps 4 to 6); without full it stops after the objects are
// applied and recorded (Stage). An add-on whose objects fail to apply
// ends the run there; the failures of the waits are joined, in order.
func (e *Engine) applyRun(ctx context.Context, set *desiredSet, run []resolvedAddon, full bool) ([]AddonChanges, error) {
	acs := make([]AddonChanges, len(run))
	invs := make([]inventory, len(run))
	for i := range run {
		what := "addon " + run[i].name
		if !full {
			what += ", applied before the workers"
		}
		end := e.opts.Timeline.Begin(what)
		var err error
		acs[i], invs[i], err = e.applyObjects(ctx, set, &run[i])
		end()
		if err != nil {
			return acs[:i+1], err
		}
		if !full {
			e.say(run[i].name, "%s (not waited for yet)", acs[i].Summary())
		}
	}
	if !full {
		return acs, nil
	}
	errs := make([]error, len(run))
	var wg sync.WaitGroup
	for i := range run {
		wg.Go(func() {
			end := e.opts.Timeline.Begin("addon " + run[i].name + ": ready")
			defer end()
			errs[i] = e.settle(ctx, set, &run[i], invs[i], &acs[i])
		})
	}
	wg.Wait()
	return acs, errors.Join(errs...)
}

// applyObjects applies one add-on's objects (Apply's steps 1 to 3) and
// returns them with the inventory it read.
func (e *Engine) applyObjects(ctx context.Context, set *desiredSet, ra *resolvedAddon) (AddonChanges, inventory, error) {
	ac := AddonChanges{Name: ra.name}
	inv, err := e.readInventory(ctx, ra.name)
	if err != nil {
		return ac, inv, err
	}
	if inv, err = e.writeInventory(ctx, ra.name, inv, union(inv.refs, ra.refs())); err != nil {
		return ac, inv, err
	}

	var crds []*target
	// The kinds the cluster serves are read again after the CRDs when one
	// changed or an object waits for its kind.
	reload := slices.ContainsFunc(ra.targets, func(t *target) bool { return t.pendingCRD })
	for _, first := range []bool{true, false} {
		for _, t := range ra.targets {
			if firstPhase(t.ref) != first {
				continue
			}
			if t.pendingCRD {
				if err := e.remap(ctx, t); err != nil {
					return ac, inv, err
				}
			}
			ch, err := e.applyObject(ctx, t)
			if err != nil {
				return ac, inv, err
			}
			ac.Changes = append(ac.Changes, ch)
			if isCRD(t.ref) {
				crds = append(crds, t)
				reload = reload || ch.Action != Unchanged
			}
		}
		if first && len(crds) > 0 {
			if err := e.waitReady(ctx, ra.name, crds, false); err != nil {
				return ac, inv, err
			}
			if reload {
				e.mapper.ResetWithContext(ctx)
			}
		}
	}
	e.log.Info("applied", "component", "addons", "addon", ra.name, "summary", ac.Summary())
	return ac, inv, nil
}

// settle waits for one applied add-on to be ready, prunes what its
// inventory inv has and it no longer does, and records its objects as its
// inventory (Apply's steps 4 to 6), adding the pruned objects to ac.
func (e *Engine) settle(ctx context.Context, set *desiredSet, ra *resolvedAddon, inv inventory, ac *AddonChanges) error {
	if err := e.waitReady(ctx, ra.name, ra.targets, true); err != nil {
		return err
	}
	if ra.nodeReady != nil {
		if err := e.waitNodes(ctx, ra.name, ra.nodeReady, ra.targets); err != nil {
			return err
		}
	}
	stale, failed, pruneErr := e.prune(ctx, ra.name, inv.refs, set.owner, false, true)
	ac.Changes = append(ac.Changes, stale...)
	if _, err := e.writeInventory(ctx, ra.name, inv, append(ra.refs(), failed...)); err != nil {
		return errors.Join(pruneErr, err)
	}
	e.say(ra.name, "%s", ac.Summary())
	return pruneErr
}

// applyObject applies one object and says what changed.
func (e *Engine) applyObject(ctx context.Context, t *target) (Change, error) {
	live, err := e.get(ctx, t.gvr, t.ref)
	if err != nil {
		return Change{}, fmt.Errorf("addon %s: %w", t.addon, err)
	}
	after, err := e.apply(ctx, t, false)
	if t.recreate && immutable(err) {
		if err := e.deleteAndWait(ctx, t); err != nil {
			return Change{}, err
		}
		if after, err = e.apply(ctx, t, false); err != nil {
			return Change{}, err
		}
		e.log.Info("object recreated", "component", "addons", "addon", t.addon, "object", t.ref.String())
		return Change{Object: t.ref, Action: Configure, Source: t.src.String(), Summary: "deleted and created again: a field that cannot change differed"}, nil
	}
	if err != nil {
		return Change{}, err
	}
	ch := classify(t, live, after)
	if ch.Action != Unchanged {
		e.log.Info("object applied", "component", "addons", "addon", t.addon, "object", t.ref.String(), "action", string(ch.Action), "reason", ch.Summary)
	}
	return ch, nil
}

// deleteAndWait deletes t's object (its dependents in the background) and
// waits until it is gone, at most Options.ReadyTimeout.
func (e *Engine) deleteAndWait(ctx context.Context, t *target) error {
	bg := metav1.DeletePropagationBackground
	err := retry(ctx, func() error {
		return e.resource(t.gvr, t.ref.Namespace).Delete(ctx, t.ref.Name, metav1.DeleteOptions{PropagationPolicy: &bg})
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("addon %s: delete %s to create it again: %w", t.addon, t.ref, err)
	}
	err = wait.PollUntilContextTimeout(ctx, e.opts.PollInterval, e.opts.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		live, err := e.get(ctx, t.gvr, t.ref)
		return live == nil && err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("addon %s: %s deleted to be created again is still there after %s: %w", t.addon, t.ref, e.opts.ReadyTimeout, err)
	}
	return nil
}

// PlanRemove reports what Remove(ctx, name) would delete.
func (e *Engine) PlanRemove(ctx context.Context, name string) (AddonChanges, error) {
	return e.remove(ctx, name, false)
}

// Remove deletes an add-on that is no longer wanted (an ingress provider
// switched to none, the user's addons emptied) through its inventory: each
// object it lists that still carries the add-on's label and rigger's field
// manager is deleted (propagation Background), then the inventory. As RKE
// deletes a disabled add-on's objects, Remove does so whatever
// Options.Prune says. An add-on without an inventory is nothing to remove.
func (e *Engine) Remove(ctx context.Context, name string) (AddonChanges, error) {
	return e.remove(ctx, name, true)
}

func (e *Engine) remove(ctx context.Context, name string, execute bool) (AddonChanges, error) {
	ac := AddonChanges{Name: name, Removed: true}
	if err := validName(name); err != nil {
		return ac, err
	}
	inv, err := e.readInventory(ctx, name)
	if err != nil || !inv.exists {
		return ac, err
	}
	changes, failed, err := e.prune(ctx, name, inv.refs, nil, true, execute)
	ac.Changes = changes
	if !execute {
		return ac, err
	}
	if err != nil {
		_, werr := e.writeInventory(ctx, name, inv, failed)
		return ac, errors.Join(err, werr)
	}
	if err := e.deleteInventory(ctx, name); err != nil {
		return ac, err
	}
	e.say(name, "%s", ac.Summary())
	return ac, nil
}

// prune deals with the objects of add-on addon's inventory (refs) that no
// add-on of the set (keep) has: each that is still rigger's is pruned when
// pruning is on (always when removing the add-on), and left as an Orphan
// otherwise. Objects are deleted only when execute is set. It returns the
// changes and the objects it failed to delete (to keep in the inventory).
func (e *Engine) prune(ctx context.Context, addon string, refs []ObjectRef, keep map[objKey]string, removing, execute bool) ([]Change, []ObjectRef, error) {
	var stale []ObjectRef
	for _, r := range refs {
		if _, ok := keep[r.key()]; !ok {
			stale = append(stale, r)
		}
	}
	sortForDelete(stale)
	var changes []Change
	var failed []ObjectRef
	var errs []error
	for _, r := range stale {
		gvr, ok, err := e.resourceOf(ctx, r)
		if err != nil {
			return changes, failed, fmt.Errorf("addon %s: prune %s: %w", addon, r, err)
		}
		if !ok {
			e.log.Debug("pruned object's kind is not served any more", "component", "addons", "addon", addon, "object", r.String())
			continue
		}
		live, err := e.get(ctx, gvr, r)
		if err != nil {
			return changes, failed, fmt.Errorf("addon %s: prune: %w", addon, err)
		}
		if live == nil || live.GetDeletionTimestamp() != nil {
			continue
		}
		if why := e.notOurs(live, addon); why != "" {
			changes = append(changes, Change{Object: r, Action: Orphan, Summary: "not pruned: " + why})
			continue
		}
		if !e.opts.Prune && !removing {
			changes = append(changes, Change{Object: r, Action: Orphan, Summary: "removed from the add-on; left in the cluster: rigger.addons.prune is false"})
			continue
		}
		if !execute {
			changes = append(changes, Change{Object: r, Action: Prune})
			continue
		}
		uid := live.GetUID()
		bg := metav1.DeletePropagationBackground
		err = retry(ctx, func() error {
			return e.resource(gvr, r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{
				PropagationPolicy: &bg,
				Preconditions:     &metav1.Preconditions{UID: &uid},
			})
		})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			e.log.Info("object pruned", "component", "addons", "addon", addon, "object", r.String())
			changes = append(changes, Change{Object: r, Action: Prune})
		case apierrors.IsConflict(err):
			changes = append(changes, Change{Object: r, Action: Orphan, Summary: "not pruned: it was deleted and created again since rigger read it"})
		default:
			failed = append(failed, r)
			errs = append(errs, fmt.Errorf("addon %s: prune %s: %w", addon, r, err))
		}
	}
	return changes, failed, errors.Join(errs...)
}

// resourceOf maps an inventory entry to its resource, in the version
// recorded or, when the cluster no longer serves that one, its preferred
// version. ok is false when the cluster does not serve the kind at all.
func (e *Engine) resourceOf(ctx context.Context, r ObjectRef) (schema.GroupVersionResource, bool, error) {
	m, err := e.mapper.RESTMappingWithContext(ctx, r.GroupKind(), r.Version)
	if meta.IsNoMatchError(err) {
		m, err = e.mapper.RESTMappingWithContext(ctx, r.GroupKind())
	}
	if meta.IsNoMatchError(err) {
		return schema.GroupVersionResource{}, false, nil
	}
	if err != nil {
		return schema.GroupVersionResource{}, false, err
	}
	return m.Resource, true, nil
}

// notOurs says why a live object listed in add-on addon's inventory is not
// rigger's to delete, or "" when it is: it must carry the add-on's label
// and have fields that rigger's field manager applied.
func (e *Engine) notOurs(live *unstructured.Unstructured, addon string) string {
	switch l, ok := live.GetLabels()[LabelAddon]; {
	case !ok:
		return "it has no " + LabelAddon + " label (it was created again by someone else)"
	case l != addon:
		return fmt.Sprintf("its %s label names add-on %q", LabelAddon, l)
	}
	var managers []string
	for _, mf := range live.GetManagedFields() {
		if mf.Manager == e.opts.FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
			return ""
		}
		if !slices.Contains(managers, mf.Manager) {
			managers = append(managers, mf.Manager)
		}
	}
	return "rigger's field manager does not manage it (managers: " + strings.Join(managers, ", ") + ")"
}
