package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/sysaddons"
	"github.com/rigger/rigger/spec"
)

// desiredAddons are the add-ons cluster.yml asks for, in the order they
// are applied: the system add-ons as RKE deploys them (package
// sysaddons), then the user's addons and addons_include. A manifest that
// cannot be rendered or read stalls: only cluster.yml can fix it.
func (s *Session) desiredAddons(ctx context.Context) ([]addons.Addon, error) {
	sys, err := sysaddons.Render(s.c)
	if err != nil {
		return nil, stall.Stalls(ReasonInvalidSpec, fmt.Errorf("render the system add-ons: %w", err))
	}
	user, err := addons.Fetcher{}.UserAddons(ctx, addons.UserInput{
		Addons: s.c.Addons, Include: s.c.AddonsInclude, BaseDir: s.opts.ConfigDir, ReadFile: s.opts.ReadInclude,
	})
	var decode *addons.DecodeError
	switch {
	case errors.As(err, &decode):
		return nil, stall.Stalls(ReasonInvalidSpec, err)
	case err != nil:
		return nil, fmt.Errorf("read the user's add-ons: %w", err)
	}
	return excludeObjects(slices.Concat(sys, user), s.c.Rigger.Addons.Exclude), nil
}

// excludeObjects leaves out of want the objects rigger.addons.exclude
// names (an add-on left empty stays: its objects applied before go).
func excludeObjects(want []addons.Addon, exclude []spec.AddonObject) []addons.Addon {
	if len(exclude) == 0 {
		return want
	}
	out := make([]addons.Addon, len(want))
	for i, a := range want {
		out[i] = addons.Addon{Name: a.Name}
		for _, o := range a.Objects {
			if !slices.ContainsFunc(exclude, func(x spec.AddonObject) bool {
				return x.Kind == o.GetKind() && x.Namespace == o.GetNamespace() && x.Name == o.GetName()
			}) {
				out[i].Objects = append(out[i].Objects, o)
			}
		}
	}
	return out
}

// addonEngine is the add-ons engine for the cluster's API server, through
// the transport as kubeClient; progress receives its lines (nil: none).
func (s *Session) addonEngine(set *pki.Set, o *observe.Cluster, progress func(addon, msg string)) (*addons.Engine, error) {
	cfg, err := s.services().RESTConfig(set, o)
	if err != nil {
		return nil, err
	}
	return addons.NewForConfig(cfg, addons.Options{
		Prune:        s.c.Rigger.Addons.Prune == nil || *s.c.Rigger.Addons.Prune,
		ReadyTimeout: time.Duration(s.c.AddonJobTimeout) * time.Second,
		Log:          s.opts.Log.With("cluster", s.c.ClusterName),
		Progress:     progress,
	})
}

// addonPlanTimeout bounds the add-ons' dry run: an API server that does
// not answer leaves them unplanned, not the plan waiting.
const addonPlanTimeout = 2 * time.Minute

// planAddons asks the API server what applying want would change (a
// server-side dry run), what removing the add-ons it no longer has would
// delete, and how the add-ons in the cluster are doing.
func (s *Session) planAddons(ctx context.Context, set *pki.Set, o *observe.Cluster, want []addons.Addon) (*addons.ChangeSet, []addons.Health, error) {
	eng, err := s.addonEngine(set, o, nil)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, addonPlanTimeout)
	defer cancel()
	cs, err := eng.Plan(ctx, want)
	if err != nil {
		return nil, nil, addonErr("plan the add-ons (server-side dry run)", err)
	}
	gone, err := removedAddons(ctx, eng, want)
	if err != nil {
		return nil, nil, err
	}
	for _, name := range gone {
		ac, err := eng.PlanRemove(ctx, name)
		if err != nil {
			return nil, nil, addonErr("plan the removal of add-on "+name, err)
		}
		cs.Addons = append(cs.Addons, ac)
	}
	health, err := eng.Health(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read the add-ons' health: %w", err)
	}
	return cs, health, nil
}

// applyAddons applies want, waiting for every add-on to be ready, and
// removes the add-ons that are in the cluster and no longer in want.
func applyAddons(ctx context.Context, eng *addons.Engine, want []addons.Addon) (*addons.ChangeSet, error) {
	cs, err := eng.Apply(ctx, want)
	if err != nil {
		return cs, addonErr("apply the add-ons", err)
	}
	gone, err := removedAddons(ctx, eng, want)
	if err != nil {
		return cs, err
	}
	for _, name := range gone {
		ac, err := eng.Remove(ctx, name)
		cs.Addons = append(cs.Addons, ac)
		if err != nil {
			return cs, addonErr("remove add-on "+name, err)
		}
	}
	return cs, nil
}

// removedAddons are the add-ons with an inventory in the cluster that want
// does not have: an add-on switched off (ingress provider none, say).
func removedAddons(ctx context.Context, eng *addons.Engine, want []addons.Addon) ([]string, error) {
	installed, err := eng.Installed(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the add-ons in the cluster: %w", err)
	}
	return slices.DeleteFunc(installed, func(name string) bool {
		return slices.ContainsFunc(want, func(a addons.Addon) bool { return a.Name == name })
	}), nil
}

// addonErr says what failed (nil for nil); an object the API server refuses as invalid
// stalls (only cluster.yml can fix it), anything else is retried.
func addonErr(what string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s: %w", what, err)
	var apply *addons.ApplyError
	if errors.As(err, &apply) && (apierrors.IsInvalid(apply.Err) || apierrors.IsBadRequest(apply.Err)) {
		return stall.Stalls(ReasonInvalidSpec, err)
	}
	return err
}

// networkAddon is the network plugin's add-on of want, if any.
func networkAddon(want []addons.Addon) []addons.Addon {
	for _, a := range want {
		if a.Name == sysaddons.NetworkPlugin {
			return []addons.Addon{a}
		}
	}
	return nil
}
