package addons

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// planTimeout bounds the add-ons' dry run: an API server that does not
// answer leaves them unplanned, not the plan waiting.
const planTimeout = 2 * time.Minute

// Exclude leaves out of want the objects rigger.addons.exclude
// names (an add-on left empty stays: its objects applied before go).
func Exclude(want []Addon, exclude []spec.AddonObject) []Addon {
	if len(exclude) == 0 {
		return want
	}
	out := make([]Addon, len(want))
	for i, a := range want {
		out[i] = a
		out[i].Objects = nil
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

// PlanAll asks the API server what applying want would change (a
// server-side dry run), what removing the add-ons it no longer has would
// delete, and how the add-ons in the cluster are doing.
func (e *Engine) PlanAll(ctx context.Context, want []Addon) (*ChangeSet, []Health, error) {
	ctx, cancel := context.WithTimeout(ctx, planTimeout)
	defer cancel()
	// Each object is read once: the health of an add-on is computed from
	// the objects its dry run read.
	e = e.reading()
	cs, err := e.Plan(ctx, want)
	if err != nil {
		return nil, nil, Refused("plan the add-ons (server-side dry run)", err)
	}
	installed, err := e.Installed(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, name := range notWanted(installed, want) {
		ac, err := e.PlanRemove(ctx, name)
		if err != nil {
			return nil, nil, Refused("plan the removal of add-on "+name, err)
		}
		cs.Addons = append(cs.Addons, ac)
	}
	return cs, e.healthOf(ctx, installed), nil
}

// ApplyAll applies want, waiting for every add-on to be ready, and
// removes the add-ons that are in the cluster and no longer in want.
func (e *Engine) ApplyAll(ctx context.Context, want []Addon) (*ChangeSet, error) {
	cs, err := e.Apply(ctx, want)
	if err != nil {
		return cs, Refused("apply the add-ons", err)
	}
	gone, err := e.removed(ctx, want)
	if err != nil {
		return cs, err
	}
	for _, name := range gone {
		ac, err := e.Remove(ctx, name)
		cs.Addons = append(cs.Addons, ac)
		if err != nil {
			return cs, Refused("remove add-on "+name, err)
		}
	}
	return cs, nil
}

// removed are the add-ons with an inventory in the cluster that want does
// not have: an add-on switched off (ingress provider none, say).
func (e *Engine) removed(ctx context.Context, want []Addon) ([]string, error) {
	installed, err := e.Installed(ctx)
	if err != nil {
		return nil, err
	}
	return notWanted(installed, want), nil
}

// notWanted are the add-ons of installed that want does not have.
func notWanted(installed []string, want []Addon) []string {
	return slices.DeleteFunc(slices.Clone(installed), func(name string) bool {
		return slices.ContainsFunc(want, func(a Addon) bool { return a.Name == name })
	})
}

// Refused says what failed (nil for nil); an object the API server refuses
// as invalid stalls (only cluster.yml can fix it), anything else is
// retried.
func Refused(what string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s: %w", what, err)
	var apply *ApplyError
	if errors.As(err, &apply) && (apierrors.IsInvalid(apply.Err) || apierrors.IsBadRequest(apply.Err)) {
		return stall.Stalls(stall.InvalidSpec, err)
	}
	return err
}
