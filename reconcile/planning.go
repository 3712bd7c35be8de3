package reconcile

import (
	"context"
	"time"

	"github.com/rigger/rigger/reconcile/decide"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/pkisource"
	"github.com/rigger/rigger/reconcile/stall"
)

// Plan observes the cluster once (observe, observeWithPKI) and decides
// what must change for it to run what cluster.yml asks for
// (decide.Compute, with the add-ons' server-side dry run). It changes
// nothing, on the nodes or in the state directory.
func (s *Session) Plan(ctx context.Context) (*decide.Planned, error) {
	return s.plan(ctx, s.asked())
}

// asked is what the session's options ask of its first plan.
func (s *Session) asked() decide.Asked {
	return decide.Asked{Rotate: s.opts.Rotate, RotateKey: s.opts.RotateKey, AllowRemovals: s.opts.AllowRemovals,
		IgnoreDockerVersion: s.opts.IgnoreDockerVersion}
}

// plan is Plan with the command line's requests a.
func (s *Session) plan(ctx context.Context, a decide.Asked) (*decide.Planned, error) {
	if s.opts.Teardown {
		return decide.Teardown(s.c, s.observeNodes(ctx, false, 0)), nil
	}
	tl := s.opts.Timeline
	end := tl.Begin("plan: read the state directory")
	st, since, err := s.loadState()
	end()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	in := decide.Input{Spec: s.c, StateDir: s.opts.StateDir, State: st, Asked: a, Now: s.opts.Now()}
	if in.Observed, in.PKI, err = s.observe(ctx, in, since, st.Recovers(s.c)); err != nil {
		return nil, err
	}
	// The rest is read at once: etcd's members (and what an upgrade would
	// leave unreadable), and the Nodes, then the add-ons' dry run.
	var (
		etcdTook, addonsTook time.Duration
		addonsErr            error
	)
	began := time.Now()
	s.observeWithPKI(ctx, in.PKI.Set, in.Observed, func(ctx context.Context) {
		s.observeStoredAPIs(ctx, in.PKI.Set, in.Observed)
		etcdTook = time.Since(began)
	}, func(ctx context.Context) {
		began := time.Now()
		in.Addons, addonsErr = s.planAllAddons(ctx, in.PKI.Set, in.Observed)
		addonsTook = time.Since(began)
	})
	observed := time.Now()
	end = tl.Begin("plan: compute")
	pl, err := decide.Compute(in)
	end()
	if err != nil {
		return nil, err
	}
	if addonsErr != nil {
		return nil, addonsErr
	}
	if e := pl.Encryption; e != nil && e.Source.Kind == pkisource.Recovered {
		s.opts.Log.Warn("state directory had no secrets encryption key: recovered it from a node",
			"cluster", s.c.ClusterName, "node", e.Source.From, "keys", e.Keys, "state_dir", s.opts.StateDir)
	}
	s.opts.Log.Debug("planned", "cluster", s.c.ClusterName, "observe", observed.Sub(start).Round(time.Millisecond),
		"etcd", etcdTook.Round(time.Millisecond), "addons", addonsTook.Round(time.Millisecond))
	return pl, nil
}

// observe reads, once, the nodes (of cluster.yml and those the last apply
// left; keep keeps their files' contents; since is how long ago the last
// apply ended) and resolves the cluster's PKI from them and the state
// directory's records in in (decide.Credentials: the state directory's,
// or recovered from a node); observeWithPKI then reads, with that PKI, the
// etcd membership and the Nodes the API server lists into the same value.
// What could not be read is recorded in it. Every plan, status and doctor
// reads the cluster so. On an error, the nodes were read (o is set) and
// the PKI was not.
func (s *Session) observe(ctx context.Context, in decide.Input, since time.Duration, keep bool) (*observe.Cluster, *pkisource.Resolved, error) {
	tl := s.opts.Timeline
	start := time.Now()
	end := tl.Begin("observe the nodes")
	in.Observed = s.observeNodes(ctx, keep, since)
	end()
	nodes := time.Now()
	end = tl.Begin("plan: resolve the PKI")
	rp, err := decide.Credentials(in)
	end()
	if err != nil {
		return in.Observed, nil, err
	}
	if rp.Source.Kind == pkisource.Recovered {
		s.opts.Log.Warn("state directory had no certificates: recovered the PKI from a node",
			"cluster", s.c.ClusterName, "node", rp.Source.From, "state_dir", s.opts.StateDir)
	}
	s.opts.Log.Debug("observed", "cluster", s.c.ClusterName, "nodes", nodes.Sub(start).Round(time.Millisecond),
		"pki", time.Since(nodes).Round(time.Millisecond))
	return in.Observed, rp, nil
}

// planAllAddons renders the add-ons and, when the API server listed the
// Nodes (o), asks it what applying them would change (planAddons). Its
// error is one that refuses the plan: add-ons that do not render or that
// the API server finds invalid. A call of the dry run the API server
// fails (etcd electing a leader, say) leaves the add-ons unplanned, as
// when it does not answer (decide.Addons.Err).
func (s *Session) planAllAddons(ctx context.Context, set *pki.Set, o *observe.Cluster) (decide.Addons, error) {
	tl := s.opts.Timeline
	end := tl.Begin("plan: render the add-ons")
	want, err := s.desiredAddons(ctx)
	end()
	if err != nil {
		return decide.Addons{}, err
	}
	ad := decide.Addons{Want: want}
	if k := o.Kubernetes; k != nil && k.Err == nil {
		end = tl.Begin("plan: add-ons' server-side dry run")
		ad.Changes, ad.Health, ad.Err = s.planAddons(ctx, set, o, want)
		end()
		if _, stalled := stall.Classify(ad.Err); stalled {
			return decide.Addons{}, ad.Err
		}
	}
	return ad, nil
}
