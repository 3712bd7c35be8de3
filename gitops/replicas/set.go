// Package replicas shares the clusters that the replicas of `rigger serve`
// follow among them, in the Kubernetes cluster they run in, so that each
// cluster is reconciled by exactly one replica at a time.
//
// The exclusion comes from a coordination.k8s.io Lease per cluster, held
// through client-go's leader election (reconcile/lock.Elector): a replica
// reconciles a cluster only while it holds that cluster's Lease. The
// spread comes from membership: each replica holds a Lease of its own
// (labelled LabelReplica), lists the others' every retry period, and
// assigns the clusters over the live ones by rendezvous hashing with
// bounded loads (Assign). A replica campaigns for the clusters assigned to
// it and, beside their holder, for those it would get if their holder were
// gone (Successor), so that it takes them over within a lease duration of
// a crash; it runs a cluster only while the cluster is its own or the
// replica it is assigned to no longer renews its membership (Healthy), and
// hands it over otherwise, as soon as the reconcile under way is over (the
// Lease is then given up at once).
package replicas

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/rigger/rigger/reconcile/lock"
)

// Labels and annotations of the Leases of serve's replicas.
const (
	// LabelReplica marks the membership Lease of a replica; its value is
	// the group (Config.Group).
	LabelReplica = "rigger.io/serve-replica"
	// LabelCluster marks the Lease of a cluster; its value is the group.
	LabelCluster = "rigger.io/serve-cluster"
	// AnnotationPath is the cluster.yml a cluster's Lease guards.
	AnnotationPath = "rigger.io/cluster-path"
)

// Default timing of the Leases of a Set. A reconcile whose Lease could not
// be renewed for DefaultRenewDeadline (after a last renewal, and at most a
// DefaultRetryPeriod before the next attempt) is cancelled; another replica
// takes the Lease over no sooner than DefaultLeaseDuration after the last
// renewal it saw, less up to a second: client-go compares the Lease's
// record with its times in whole seconds, so a renewal within the second
// of the one before is not seen as one. The 10 s left between the two are
// the time a cancelled reconcile has to stop (it stops between steps, and
// its Docker and API calls end with its context). A crashed replica's
// clusters are taken over within DefaultLeaseDuration plus a few retry
// periods (the successor polls the Lease every retry period, with jitter).
const (
	DefaultLeaseDuration = 30 * time.Second
	DefaultRenewDeadline = 15 * time.Second
	DefaultRetryPeriod   = 4 * time.Second
)

// gcAfter is how long the membership Lease of a replica that no longer
// renews it (it crashed; one that stops deletes its own) is kept, for
// people, before a live replica deletes it.
const gcAfter = time.Hour

// Config is what a Set needs.
type Config struct {
	Client kubernetes.Interface
	// Namespace holds the Leases.
	Namespace string
	// Group names the replicas that share the clusters (serve's
	// --lease-name): it prefixes the Leases' names and is the value of
	// their labels.
	Group string
	// ID names this replica among them (the holderIdentity of its Leases).
	ID string
	// Address is where this replica answers HTTP, for the webhooks the
	// others forward (Peers); "" when it cannot be reached.
	Address string
	// AgentAddress is where this replica's agent tunnel endpoint answers
	// the others (host:port), for the tunnels of nodes it holds; "" when
	// it has none.
	AgentAddress string
	// Timing of every Lease; zero fields take DefaultLeaseDuration,
	// DefaultRenewDeadline and DefaultRetryPeriod. Duration must be more
	// than RenewDeadline + 3 × RetryPeriod + 1 s (see Healthy, and the
	// defaults).
	Timing lock.LeaseTiming
	Log    *slog.Logger
}

// Member is a live replica as its membership Lease says.
type Member struct {
	ID, Address, AgentAddress string
}

// Set is this replica's view of the replicas and of the clusters: which it
// campaigns for, which it runs. Make one with New, run it with Run.
type Set struct {
	cfg Config

	mu sync.Mutex
	// seen are the membership Leases as last read, by name.
	seen map[string]*sighting
	// clusters are the paths of every cluster.yml, as Campaigns was last
	// told; assigned is Assign over the live members and them.
	clusters []string
	assigned map[string]string
	// campaigns is what Campaigns last returned.
	campaigns map[string]bool
	// updated is closed and replaced whenever members or clusters change.
	updated chan struct{}

	changed chan struct{}
	member  atomic.Bool
	// settled is set once a list of the membership Leases held this
	// replica's own: before, it would see itself alone and campaign for
	// every cluster.
	settled bool
	// clusterSeen are the clusters' Leases as Leases last read them, by
	// name: how long each stayed unchanged.
	clusterSeen map[string]leaseSighting
}

// leaseSighting is a cluster's Lease at a resourceVersion, and when that
// version was first read here (the local clock).
type leaseSighting struct {
	rv string
	at time.Time
}

// sighting is a membership Lease as read, and when its renewal was first
// read here (the local clock: replicas' clocks are not compared).
type sighting struct {
	member  Member
	renewed string
	at      time.Time
	// name, rv and stale are for the garbage collection of the Leases
	// of replicas that crashed or gave theirs up without deleting it.
	name, rv string
	stale    bool
}

// New checks cfg and makes a Set.
func New(cfg Config) (*Set, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Group == "" || cfg.ID == "" {
		return nil, errors.New("replicas: a client, a namespace, a group and an id are needed")
	}
	t := &cfg.Timing
	t.Duration = cmp.Or(t.Duration, DefaultLeaseDuration)
	t.RenewDeadline = cmp.Or(t.RenewDeadline, DefaultRenewDeadline)
	t.RetryPeriod = cmp.Or(t.RetryPeriod, DefaultRetryPeriod)
	if t.Now == nil {
		t.Now = time.Now
	}
	if t.Duration <= t.RenewDeadline+3*t.RetryPeriod+time.Second {
		return nil, fmt.Errorf("lease duration %s must be more than the renew deadline %s plus 3 retry periods of %s and a second: "+
			"a replica that stopped renewing must be judged gone before its Leases expire", t.Duration, t.RenewDeadline, t.RetryPeriod)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Set{cfg: cfg, seen: map[string]*sighting{}, updated: make(chan struct{}), changed: make(chan struct{}, 1),
		assigned: map[string]string{}}, nil
}

// ID is this replica's id.
func (s *Set) ID() string { return s.cfg.ID }

// Timing is the Leases' timing, defaults filled in.
func (s *Set) Timing() lock.LeaseTiming { return s.cfg.Timing }

// Member reports whether this replica holds its membership Lease: it is
// ready to take its share (serve's /readyz).
func (s *Set) Member() bool { return s.member.Load() }

// Changed is signalled when the clusters Campaigns returns may have
// changed (a replica came or went): the caller calls Campaigns again.
func (s *Set) Changed() <-chan struct{} { return s.changed }

// memberLease is the name of the membership Lease of id.
func (s *Set) memberLease(id string) string { return s.cfg.Group + "-r-" + digest(id) }

// ClusterLease is the name of the Lease of the cluster.yml at path.
func ClusterLease(group, path string) string { return group + "-c-" + digest(path) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:6])
}

// Run holds this replica's membership Lease and reads the others' every
// retry period until ctx ends; it then gives its Lease up and deletes it.
// It returns an error only when it cannot start.
func (s *Set) Run(ctx context.Context) error {
	t := s.cfg.Timing
	el := lock.NewElectorWith(s.cfg.Client, s.cfg.Namespace, s.memberLease(s.cfg.ID), s.cfg.ID, lock.ElectorOptions{
		Labels: map[string]string{LabelReplica: s.cfg.Group}, Address: s.cfg.Address, AgentAddress: s.cfg.AgentAddress}, t, s.cfg.Log.With("replica", s.cfg.ID))
	done := make(chan error, 1)
	go func() {
		done <- el.Run(ctx, func(lctx context.Context) {
			s.member.Store(true)
			defer s.member.Store(false)
			<-lctx.Done()
		})
	}()
	tick := time.NewTicker(t.RetryPeriod)
	defer tick.Stop()
	for {
		s.read(ctx)
		var err error
		select {
		case <-ctx.Done():
			err = <-done
		case err = <-done:
		case <-tick.C:
			continue
		}
		if ctx.Err() != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.RenewDeadline)
			defer cancel()
			// Given up by the elector already: the others drop it at
			// their next read. Deleted, so that Leases of replicas
			// that stopped do not pile up.
			_ = s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace).Delete(dctx, s.memberLease(s.cfg.ID), metav1.DeleteOptions{})
		}
		return err
	}
}

// read lists the membership Leases, notes their renewals, deletes those of
// replicas gone for gcAfter, and recomputes the assignment.
func (s *Set) read(ctx context.Context) {
	t := s.cfg.Timing
	rctx, cancel := context.WithTimeout(ctx, t.RenewDeadline)
	defer cancel()
	leases := s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace)
	list, err := leases.List(rctx, metav1.ListOptions{LabelSelector: labels.Set{LabelReplica: s.cfg.Group}.String()})
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Log.Warn("list the replicas' Leases; the last list stands", "err", err)
		}
		return
	}
	now := t.Now()
	s.mu.Lock()
	var gone []*sighting
	seen := make(map[string]*sighting, len(list.Items))
	for i := range list.Items {
		l := &list.Items[i]
		sg := sight(l, s.seen[l.Name], now)
		seen[l.Name] = sg
		if sg.stale {
			gone = append(gone, sg)
		}
	}
	s.seen = seen
	if sg := seen[s.memberLease(s.cfg.ID)]; sg != nil && sg.member.ID == s.cfg.ID {
		s.settled = true
	}
	s.recompute(now)
	s.mu.Unlock()
	for _, g := range gone {
		if g.name == s.memberLease(s.cfg.ID) {
			continue
		}
		rv := g.rv // only if nobody took it meanwhile
		err := leases.Delete(rctx, g.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if err == nil {
			s.cfg.Log.Info("deleted the Lease of a replica gone for long", "lease", g.name, "replica", g.member.ID)
		}
	}
}

// sight is the sighting of l at now, given the one before (nil at first).
func sight(l *coordinationv1.Lease, before *sighting, now time.Time) *sighting {
	r := resourcelock.LeaseSpecToLeaderElectionRecord(&l.Spec)
	renewed := r.HolderIdentity + "@" + r.RenewTime.UTC().Format(time.RFC3339Nano)
	sg := &sighting{member: Member{ID: r.HolderIdentity}, renewed: renewed, at: now, name: l.Name, rv: l.ResourceVersion}
	if h, err := lock.ParseHolder([]byte(l.Annotations[lock.HolderAnnotation])); err == nil && h.ID == r.HolderIdentity {
		sg.member.Address, sg.member.AgentAddress = h.Address, h.AgentAddress
	}
	if before != nil && before.renewed == renewed {
		sg.at = before.at
	}
	last := r.RenewTime.Time
	// Stale: nobody has held it for gcAfter (its renewal unchanged that
	// long, by the Lease's time and as seen here).
	sg.stale = now.Sub(sg.at) > gcAfter && (last.IsZero() || now.Sub(last) > gcAfter)
	return sg
}

// live are the ids of the replicas that renewed their membership within a
// lease duration as seen here, this one always among them. Called with
// s.mu held.
func (s *Set) live(now time.Time) []string {
	ids := []string{s.cfg.ID}
	for _, sg := range s.seen {
		if sg.member.ID != "" && now.Sub(sg.at) < s.cfg.Timing.Duration {
			ids = append(ids, sg.member.ID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Members are the live replicas, this one among them, by id.
func (s *Set) Members() []Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Member{{ID: s.cfg.ID, Address: s.cfg.Address, AgentAddress: s.cfg.AgentAddress}}
	for _, id := range s.live(s.cfg.Timing.Now()) {
		for _, sg := range s.seen {
			if sg.member.ID == id && id != s.cfg.ID {
				out = append(out, sg.member)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Healthy reports whether the replica id renewed its membership within a
// renew deadline and a retry period, as seen here: a replica that has not
// is about to lose its Leases (client-go gives a Lease up after a renew
// deadline without renewal), so the clusters assigned to it are run by
// their successor as soon as it holds their Lease. Called with s.mu held.
func (s *Set) healthy(id string, now time.Time) bool {
	if id == s.cfg.ID {
		return true
	}
	for _, sg := range s.seen {
		if sg.member.ID == id {
			return now.Sub(sg.at) < s.cfg.Timing.RenewDeadline+s.cfg.Timing.RetryPeriod
		}
	}
	return false
}

// recompute assigns the clusters over the live replicas, wakes the holds
// up, and signals Changed when the campaigns change. Called with s.mu held.
func (s *Set) recompute(now time.Time) {
	s.assigned = Assign(s.live(now), s.clusters)
	close(s.updated)
	s.updated = make(chan struct{})
	if s.campaigns != nil && !maps.Equal(s.campaigns, s.campaignsLocked(now)) {
		select {
		case s.changed <- struct{}{}:
		default:
		}
	}
}

// Campaigns records clusters (the paths of every cluster.yml followed)
// and returns those this replica campaigns for: the ones assigned to it,
// and the ones it would get if their replica were gone. It returns none
// until this replica has read its own membership Lease back among the
// others'.
func (s *Set) Campaigns(clusters []string) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Timing.Now()
	s.clusters = slices.Sorted(slices.Values(clusters))
	s.campaigns = nil // the caller gets them: no Changed for them
	s.recompute(now)
	s.campaigns = s.campaignsLocked(now)
	return maps.Clone(s.campaigns)
}

func (s *Set) campaignsLocked(now time.Time) map[string]bool {
	out := map[string]bool{}
	if !s.settled {
		return out
	}
	live := s.live(now)
	for _, c := range s.clusters {
		if s.assigned[c] == s.cfg.ID || Successor(live, s.clusters, c) == s.cfg.ID {
			out[c] = true
		}
	}
	return out
}

// mayRun reports whether this replica runs the cluster at path once it
// holds its Lease: it is assigned to it, or the replica it is assigned to
// is not healthy. It returns the replica it is assigned to, and a channel
// closed at the next change.
func (s *Set) mayRun(path string) (bool, string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	owner := s.assigned[path]
	return owner == "" || owner == s.cfg.ID || !s.healthy(owner, s.cfg.Timing.Now()), owner, s.updated
}

// Hold campaigns for the Lease of the cluster.yml at path until ctx ends,
// and runs run while it holds it and mayRun says so. run's context is
// cancelled when the Lease is lost or ctx ends: run must stop at once.
// handOver is closed when the cluster is to go to the replica it is
// assigned to: run returns once the work under way is over (the Lease is
// still held meanwhile). Once run has returned, the Lease is given up at
// once (the next holder takes it within a retry period) and Hold
// campaigns again. It returns an error only when it cannot start.
func (s *Set) Hold(ctx context.Context, path string, run func(ctx context.Context, handOver <-chan struct{})) error {
	name := ClusterLease(s.cfg.Group, path)
	log := s.cfg.Log.With("path", path, "lease", name, "replica", s.cfg.ID)
	el := lock.NewElectorWith(s.cfg.Client, s.cfg.Namespace, name, s.cfg.ID, lock.ElectorOptions{
		Labels:      map[string]string{LabelCluster: s.cfg.Group},
		Annotations: map[string]string{AnnotationPath: path},
		Address:     s.cfg.Address,
	}, s.cfg.Timing, slog.New(quiet{log.Handler()}))
	return el.Run(ctx, func(lctx context.Context) {
		ok, owner, updated := s.mayRun(path)
		if !ok {
			log.Debug("cluster's Lease taken, handed to its replica", "assigned_to", owner)
			return
		}
		handOver := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(lctx, handOver)
		}()
		for {
			select {
			case <-done:
				return
			case <-updated:
				if ok, owner, updated = s.mayRun(path); !ok {
					log.Info("handing the cluster over to the replica it is assigned to, once the reconcile under way is over", "assigned_to", owner)
					close(handOver)
					<-done
					return
				}
			}
		}
	})
}

// quiet is a slog handler that turns Info into Debug: the elector's
// per-term messages, for a Lease per cluster, would flood serve's log (the
// Server logs holds and hand-overs itself).
type quiet struct{ slog.Handler }

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return q.Handler.Enabled(ctx, l)
}

func (q quiet) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	return q.Handler.Handle(ctx, r)
}

func (q quiet) WithAttrs(a []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(a)} }
func (q quiet) WithGroup(n string) slog.Handler      { return quiet{q.Handler.WithGroup(n)} }

// Leases lists the clusters' Leases of the group and returns the holder of
// each by the path it guards (its AnnotationPath; "" when none holds it).
// paths are those of every cluster.yml at the head this replica read: the
// Lease of a path not among them is deleted when nobody holds it, that is
// when it was given up (no holder), or when it stayed unchanged (one
// resourceVersion) for a lease duration as seen here (its holder crashed:
// a holder renews every retry period). The delete is conditional on that
// resourceVersion, so a Lease taken or renewed meanwhile (by a replica
// that read an older head, where the cluster.yml still is, or a newer one,
// where it is back) is kept, and a Lease deleted under a replica that
// campaigns for it is made again by its campaign: the Lease of a cluster
// in the repository at this replica's head is never deleted, and no
// holder ever loses a Lease to the deletion. A Lease without a path is
// left alone.
func (s *Set) Leases(ctx context.Context, paths []string) (map[string]string, error) {
	t := s.cfg.Timing
	rctx, cancel := context.WithTimeout(ctx, t.RenewDeadline)
	defer cancel()
	leases := s.cfg.Client.CoordinationV1().Leases(s.cfg.Namespace)
	list, err := leases.List(rctx, metav1.ListOptions{LabelSelector: labels.Set{LabelCluster: s.cfg.Group}.String()})
	if err != nil {
		return nil, fmt.Errorf("list the clusters' Leases: %w", err)
	}
	in := make(map[string]bool, len(paths))
	for _, p := range paths {
		in[p] = true
	}
	now := t.Now()
	holders := map[string]string{}
	type doomed struct{ name, rv, path, holder string }
	var gone []doomed
	s.mu.Lock()
	seen := make(map[string]leaseSighting, len(list.Items))
	for i := range list.Items {
		l := &list.Items[i]
		path := l.Annotations[AnnotationPath]
		sg := leaseSighting{rv: l.ResourceVersion, at: now}
		if before, ok := s.clusterSeen[l.Name]; ok && before.rv == sg.rv {
			sg.at = before.at
		}
		seen[l.Name] = sg
		holder := ""
		if h := l.Spec.HolderIdentity; h != nil {
			holder = *h
		}
		if path == "" {
			continue
		}
		if in[path] {
			holders[path] = holder
			continue
		}
		if holder == "" || now.Sub(sg.at) >= t.Duration {
			gone = append(gone, doomed{l.Name, l.ResourceVersion, path, holder})
		}
	}
	s.clusterSeen = seen
	s.mu.Unlock()
	for _, d := range gone {
		err := leases.Delete(rctx, d.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &d.rv}})
		switch {
		case err == nil:
			s.cfg.Log.Info("deleted the Lease of a cluster.yml gone from the repository", "lease", d.name, "path", d.path, "last_holder", d.holder)
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			// Taken, renewed or deleted meanwhile: looked at again next time.
		default:
			s.cfg.Log.Warn("delete the Lease of a cluster.yml gone from the repository; tried again at the next fetch", "lease", d.name, "path", d.path, "err", err)
		}
	}
	return holders, nil
}
