package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/sysaddons"
)

// desiredAddons are the add-ons cluster.yml asks for, in the order they
// are applied: the system add-ons as RKE deploys them (package
// sysaddons), then the user's addons and addons_include. A manifest that
// cannot be rendered or read stalls: only cluster.yml can fix it.
func (s *Session) desiredAddons(ctx context.Context) ([]addons.Addon, error) {
	sys, err := sysaddons.Render(s.c)
	if err != nil {
		return nil, stall.Stalls(stall.InvalidSpec, fmt.Errorf("render the system add-ons: %w", err))
	}
	user, err := addons.Fetcher{}.UserAddons(ctx, addons.UserInput{
		Addons: s.c.Addons, Include: s.c.AddonsInclude, BaseDir: s.opts.ConfigDir, ReadFile: s.opts.ReadInclude,
	})
	var decode *addons.DecodeError
	switch {
	case errors.As(err, &decode):
		return nil, stall.Stalls(stall.InvalidSpec, err)
	case err != nil:
		return nil, fmt.Errorf("read the user's add-ons: %w", err)
	}
	return addons.Exclude(slices.Concat(sys, user), s.c.Rigger.Addons.Exclude), nil
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
		Timeline:     s.opts.Timeline,
	})
}

// planAddons asks the API server what applying want would change, what
// removing the add-ons it no longer has would delete, and how the add-ons
// in the cluster are doing (addons.Engine.PlanAll).
func (s *Session) planAddons(ctx context.Context, set *pki.Set, o *observe.Cluster, want []addons.Addon) (*addons.ChangeSet, []addons.Health, error) {
	eng, err := s.addonEngine(set, o, nil)
	if err != nil {
		return nil, nil, err
	}
	return eng.PlanAll(ctx, want)
}

// addonsPhase is the add-ons' part of an apply, through one engine made
// once the apply's hooks are (start): the network plugin put in the
// cluster before the workers (stageNetwork, through kubenode.Side) and
// every add-on applied after them (apply, execute.Options.Addons).
type addonsPhase struct {
	*Session
	pl  *decide.Planned
	eng *addons.Engine
	err error
	// applied is what apply changed; nil until it ran.
	applied *addons.ChangeSet
}

// start makes the engine, whose progress say receives.
func (p *addonsPhase) start(say func(node, msg string)) {
	p.eng, p.err = p.addonEngine(p.pl.PKI, p.pl.Observed, func(addon, msg string) { say("addon "+addon, msg) })
}

// stageNetwork applies the network plugin, without waiting for it (its
// pods run once the kubelets do).
func (p *addonsPhase) stageNetwork(ctx context.Context) error {
	if p.err != nil {
		return fmt.Errorf("apply the network plugin: %w", p.err)
	}
	_, err := p.eng.Stage(ctx, sysaddons.Network(p.pl.AddonsWant))
	return addons.Refused("apply the network plugin", err)
}

// apply applies and waits for every add-on the plan read, once repair has
// waited for the Nodes that are not Ready, which the add-ons' pods would
// wait for.
func (p *addonsPhase) apply(ctx context.Context, repair func(context.Context) error) error {
	if p.err != nil {
		return fmt.Errorf("apply the add-ons: %w", p.err)
	}
	if err := repair(ctx); err != nil {
		return fmt.Errorf("before the add-ons: %w", err)
	}
	var err error
	p.applied, err = p.eng.ApplyAll(ctx, p.pl.AddonsWant)
	return err
}
