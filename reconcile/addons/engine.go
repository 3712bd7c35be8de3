package addons

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/rigger/rigger/internal/timeline"
	"github.com/rigger/rigger/reconcile/internal/apiretry"
)

// Defaults of Options.
const (
	// DefaultReadyTimeout bounds the wait for one add-on's objects to be
	// ready: RKE's default addon_job_timeout.
	DefaultReadyTimeout = 45 * time.Second
	// DefaultPollInterval is how often readiness is checked.
	DefaultPollInterval = 2 * time.Second
	// DefaultInventoryNamespace holds the inventories, as RKE keeps its
	// add-on ConfigMaps in kube-system.
	DefaultInventoryNamespace = "kube-system"
	// FieldValidationStrict makes the API server reject an object with a
	// field its schema does not have (a misspelled key), as kubectl does.
	FieldValidationStrict = "Strict"
)

// Options configure an Engine. The zero value of every field but Prune
// takes its default; Prune's zero value is false (never prune).
type Options struct {
	// FieldManager is the server-side apply field manager. Default "rigger".
	FieldManager string
	// InventoryNamespace holds the inventory ConfigMaps. Default kube-system.
	InventoryNamespace string
	// Prune deletes the objects removed from an add-on since its last apply
	// (cluster.yml's rigger.addons.prune, true by default there). False
	// keeps RKE's behaviour: they stay in the cluster.
	Prune bool
	// ReadyTimeout bounds the wait for one add-on's objects to be ready
	// (cluster.yml's addon_job_timeout), measured from the last progress:
	// an object's status or one of its pods' containers that changed, a
	// restart back-off the kubelet announced (see progress). Default
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// PollInterval is how often readiness is checked. Default
	// DefaultPollInterval.
	PollInterval time.Duration
	// FieldValidation is the server's field validation of applied objects:
	// "Strict" (default), "Warn" or "Ignore".
	FieldValidation string
	// Log receives what operators need; nil: nothing is logged.
	Log *slog.Logger
	// Progress receives progress lines for people, one call a line, with
	// the add-on's name ("addon <name>: <message>" is how to print them).
	// Nil: silent. It is called from the goroutine that called the Engine.
	Progress func(addon, message string)
	// Timeline, when set, records each add-on's apply and wait (rigger
	// apply --timings).
	Timeline *timeline.Timeline
}

// Mapper maps kinds to the cluster's resources. The engine resets it once
// it has applied CRDs, so that their kinds become known. A
// restmapper.DeferredDiscoveryRESTMapper is one.
type Mapper interface {
	RESTMappingWithContext(ctx context.Context, gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error)
	ResetWithContext(ctx context.Context)
}

var _ Mapper = (*restmapper.DeferredDiscoveryRESTMapper)(nil)

// Engine applies add-ons to one cluster. Its methods may be called from
// several goroutines, but two calls must not work on the same add-on at
// once (rigger's cluster lock sees to that).
type Engine struct {
	dyn    dynamic.Interface
	mapper Mapper
	opts   Options
	log    *slog.Logger
	// reads, when set, keeps every object get read, so that one
	// operation reads each object once (PlanAll).
	reads *readCache
}

// readCache is the objects an engine read, by resource and name; a nil
// object is one that was not found.
type readCache struct {
	mu   sync.Mutex
	objs map[readKey]*unstructured.Unstructured
}

type readKey struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// reading is a copy of e that reads each object once (its readCache).
func (e *Engine) reading() *Engine {
	c := *e
	c.reads = &readCache{objs: map[readKey]*unstructured.Unstructured{}}
	return &c
}

// New returns an engine that talks to the cluster through dyn and maps
// kinds with mapper.
func New(dyn dynamic.Interface, mapper Mapper, opts Options) *Engine {
	if opts.FieldManager == "" {
		opts.FieldManager = ManagedBy
	}
	if opts.InventoryNamespace == "" {
		opts.InventoryNamespace = DefaultInventoryNamespace
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = DefaultReadyTimeout
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.FieldValidation == "" {
		opts.FieldValidation = FieldValidationStrict
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Engine{dyn: dyn, mapper: mapper, opts: opts, log: log}
}

// NewForConfig returns an engine for the cluster of cfg, with a dynamic
// client and a RESTMapper from the API server's discovery (cached, and
// refreshed after CRDs are applied). The API server's warnings (deprecated
// APIs, unknown fields when FieldValidation is "Warn") are logged.
func NewForConfig(cfg *rest.Config, opts Options) (*Engine, error) {
	cfg = rest.CopyConfig(cfg)
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.WarningHandlerWithContext = warningLogger{log}
	cfg.WarningHandler = nil
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("add-ons client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("add-ons discovery client: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapperWithContext(memory.NewMemCacheClientWithContext(discovery.ToDiscoveryInterfaceWithContext(dc)))
	return New(dyn, mapper, opts), nil
}

// warningLogger logs the API server's warnings.
type warningLogger struct{ log *slog.Logger }

func (w warningLogger) HandleWarningHeaderWithContext(ctx context.Context, code int, agent, text string) {
	if code == 299 && text != "" {
		w.log.WarnContext(ctx, "API server warning", "component", "addons", "warning", text)
	}
}

func (e *Engine) say(addon, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.log.Info(msg, "component", "addons", "addon", addon)
	if e.opts.Progress != nil {
		e.opts.Progress(addon, msg)
	}
}

// target is one object of an add-on as the engine applies it.
type target struct {
	addon string
	src   Source
	// ref names the object: its namespace defaulted to "default" for a
	// namespaced kind, cleared for a cluster-scoped one.
	ref        ObjectRef
	gvr        schema.GroupVersionResource
	namespaced bool
	// pendingCRD: the cluster does not serve the kind yet; a CRD of the
	// same apply defines it.
	pendingCRD bool
	// body is what is applied: a copy of the object with ref's namespace
	// and the LabelAddon label.
	body *unstructured.Unstructured
	// recreate: the add-on's Recreate names it.
	recreate bool
}

// resolvedAddon is an add-on whose objects are mapped to the cluster's
// resources, in apply order.
type resolvedAddon struct {
	name       string
	targets    []*target
	nodeReady  func(*unstructured.Unstructured) string
	concurrent bool
}

// refs are the add-on's objects.
func (ra *resolvedAddon) refs() []ObjectRef {
	refs := make([]ObjectRef, len(ra.targets))
	for i, t := range ra.targets {
		refs[i] = t.ref
	}
	return refs
}

// desiredSet is every add-on of one Plan or Apply.
type desiredSet struct {
	addons []resolvedAddon
	// owner is the add-on of every object of the set.
	owner map[objKey]string
	// crds are the kinds the set's CRDs define.
	crds map[schema.GroupKind]crdKind
	// namespaces are the Namespaces the set creates.
	namespaces map[string]bool
}

// crdKind is what a CRD of the set says of its kind.
type crdKind struct {
	plural     string
	namespaced bool
}

// resolve validates addons and maps their objects.
func (e *Engine) resolve(ctx context.Context, addons []Addon) (*desiredSet, error) {
	set := &desiredSet{owner: map[objKey]string{}, crds: map[schema.GroupKind]crdKind{}, namespaces: map[string]bool{}}
	seenAddon := map[string]bool{}
	for _, a := range addons {
		if err := validName(a.Name); err != nil {
			return nil, err
		}
		if seenAddon[a.Name] {
			return nil, fmt.Errorf("add-on %q is given twice", a.Name)
		}
		seenAddon[a.Name] = true
		if len(a.Objects) > DefaultMaxObjects {
			return nil, fmt.Errorf("addon %s: %d objects, more than the %d an inventory holds: split the add-on", a.Name, len(a.Objects), DefaultMaxObjects)
		}
		for _, o := range a.Objects {
			if o.Unstructured == nil {
				return nil, fmt.Errorf("addon %s: an object is nil (%s)", a.Name, o.Source)
			}
			r := refOf(o.Unstructured)
			if isCRD(r) {
				group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
				kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
				plural, _, _ := unstructured.NestedString(o.Object, "spec", "names", "plural")
				scope, _, _ := unstructured.NestedString(o.Object, "spec", "scope")
				set.crds[schema.GroupKind{Group: group, Kind: kind}] = crdKind{plural: plural, namespaced: scope != "Cluster"}
			}
			if isNamespace(r) {
				set.namespaces[r.Name] = true
			}
		}
	}
	reset := false
	for _, a := range addons {
		ra := resolvedAddon{name: a.Name, nodeReady: a.NodeReady, concurrent: a.Concurrent}
		first := map[objKey]Source{}
		for _, o := range a.Objects {
			t, err := e.mapObject(ctx, set, a.Name, o, &reset)
			if err != nil {
				return nil, err
			}
			k := t.ref.key()
			if other, ok := set.owner[k]; ok {
				if other == a.Name {
					return nil, fmt.Errorf("addon %s: %s is given twice (%s and %s)", a.Name, t.ref, first[k], o.Source)
				}
				return nil, fmt.Errorf("addon %s: %s (%s) is also in add-on %s: an object belongs to one add-on", a.Name, t.ref, o.Source, other)
			}
			set.owner[k] = a.Name
			first[k] = o.Source
			t.recreate = slices.ContainsFunc(a.Recreate, func(r ObjectRef) bool { return r.key() == k })
			ra.targets = append(ra.targets, t)
		}
		sortForApply(ra.targets, func(t *target) ObjectRef { return t.ref })
		set.addons = append(set.addons, ra)
	}
	return set, nil
}

// mapObject maps one object to its resource. A kind the cluster does not
// serve makes the mapper reload discovery once per resolve (*reset).
func (e *Engine) mapObject(ctx context.Context, set *desiredSet, addon string, o Object, reset *bool) (*target, error) {
	ref := refOf(o.Unstructured)
	t := &target{addon: addon, src: o.Source, ref: ref}
	m, err := e.mapper.RESTMappingWithContext(ctx, ref.GroupKind(), ref.Version)
	if meta.IsNoMatchError(err) && !*reset {
		*reset = true
		e.mapper.ResetWithContext(ctx)
		m, err = e.mapper.RESTMappingWithContext(ctx, ref.GroupKind(), ref.Version)
	}
	switch {
	case err == nil:
		t.gvr = m.Resource
		t.namespaced = m.Scope.Name() == meta.RESTScopeNameNamespace
	case meta.IsNoMatchError(err):
		ck, ok := set.crds[ref.GroupKind()]
		if !ok || ck.plural == "" {
			return nil, &ApplyError{Addon: addon, Object: ref, Source: o.Source,
				Err: fmt.Errorf("the cluster serves no %s in API version %s (is its CustomResourceDefinition installed?)", ref.Kind, o.GetAPIVersion())}
		}
		t.gvr = schema.GroupVersionResource{Group: ref.Group, Version: ref.Version, Resource: ck.plural}
		t.namespaced = ck.namespaced
		t.pendingCRD = true
	default:
		return nil, fmt.Errorf("addon %s: map %s: %w", addon, ref, err)
	}
	if t.namespaced {
		if t.ref.Namespace == "" {
			t.ref.Namespace = metav1.NamespaceDefault
		}
	} else {
		t.ref.Namespace = ""
	}
	t.body = o.DeepCopy()
	t.body.SetNamespace(t.ref.Namespace)
	labels := t.body.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelAddon] = addon
	t.body.SetLabels(labels)
	return t, nil
}

// remap maps a target whose CRD was pending, now that it is established.
func (e *Engine) remap(ctx context.Context, t *target) error {
	m, err := e.mapper.RESTMappingWithContext(ctx, t.ref.GroupKind(), t.ref.Version)
	if err != nil {
		return &ApplyError{Addon: t.addon, Object: t.ref, Source: t.src,
			Err: fmt.Errorf("the cluster does not serve its kind yet (put its CustomResourceDefinition in this add-on or an earlier one): %w", err)}
	}
	t.gvr = m.Resource
	t.pendingCRD = false
	return nil
}

// resource is the client of t's resource in its namespace.
func (e *Engine) resource(gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return e.dyn.Resource(gvr)
	}
	return e.dyn.Resource(gvr).Namespace(namespace)
}

// get reads the live object, nil when there is none.
func (e *Engine) get(ctx context.Context, gvr schema.GroupVersionResource, ref ObjectRef) (*unstructured.Unstructured, error) {
	key := readKey{gvr, ref.Namespace, ref.Name}
	if c := e.reads; c != nil {
		c.mu.Lock()
		live, ok := c.objs[key]
		c.mu.Unlock()
		if ok {
			return live, nil
		}
	}
	var live *unstructured.Unstructured
	err := retry(ctx, func() error {
		var err error
		live, err = e.resource(gvr, ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		live, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", ref, err)
	}
	if c := e.reads; c != nil {
		c.mu.Lock()
		c.objs[key] = live
		c.mu.Unlock()
	}
	return live, nil
}

// apply server-side applies t (a dry run when dryRun), forcing conflicts:
// rigger owns the fields of what it applies.
func (e *Engine) apply(ctx context.Context, t *target, dryRun bool) (*unstructured.Unstructured, error) {
	data, err := t.body.MarshalJSON()
	if err != nil {
		return nil, &ApplyError{Addon: t.addon, Object: t.ref, Source: t.src, DryRun: dryRun, Err: err}
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: e.opts.FieldManager, Force: &force, FieldValidation: e.opts.FieldValidation}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var out *unstructured.Unstructured
	err = retry(ctx, func() error {
		var err error
		out, err = e.resource(t.gvr, t.ref.Namespace).Patch(ctx, t.ref.Name, types.ApplyPatchType, data, opts)
		return err
	})
	if err != nil {
		if _, ok := err.(apierrors.APIStatus); ok || meta.IsNoMatchError(err) {
			return nil, &ApplyError{Addon: t.addon, Object: t.ref, Source: t.src, DryRun: dryRun, Err: err}
		}
		return nil, fmt.Errorf("addon %s: apply %s: %w", t.addon, t.ref, err)
	}
	return out, nil
}

// classify compares the live object (nil: none) with the result of
// applying t.
func classify(t *target, live, after *unstructured.Unstructured) Change {
	ch := Change{Object: t.ref, Source: t.src.String()}
	if live == nil {
		ch.Action = Create
		return ch
	}
	diffs := diffObjects(normalize(live.Object), normalize(after.Object))
	if len(diffs) == 0 {
		ch.Action = Unchanged
		return ch
	}
	ch.Action = Configure
	ch.Summary = summarize(diffs, t.ref.Group == "" && t.ref.Kind == "Secret")
	for i, d := range diffs {
		if i == maxFields {
			break
		}
		ch.Fields = append(ch.Fields, d.Path)
	}
	return ch
}

// maxFields is how many paths a Change lists.
const maxFields = 50

// retryBackoff spaces the retries of a call the API server failed for a
// passing reason (about half a minute in all).
var retryBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 6, Cap: 10 * time.Second}

// retry calls fn until it succeeds, fails for good or the retries run out.
func retry(ctx context.Context, fn func() error) error {
	return apiretry.Do(ctx, retryBackoff, apiretry.Passes, func(context.Context) error { return fn() })
}
