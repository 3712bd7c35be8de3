package addons_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/rigger/rigger/internal/apiservertest"
	"github.com/rigger/rigger/reconcile/addons"
)

// TestEngineE2E runs the engine against a real API server with its
// controller manager and scheduler, and no nodes. The subtests share the
// server; each works in namespaces and add-ons of its own.
func TestEngineE2E(t *testing.T) {
	s := apiservertest.Start(t, apiservertest.Options{ControllerManager: true, Scheduler: true})
	kc := kubernetes.NewForConfigOrDie(s.Config)
	t.Run("apply, re-apply, change, drift, prune", func(t *testing.T) { testApplyAndPrune(t, s.Config, kc) })
	t.Run("prune switched off keeps removed objects", func(t *testing.T) { testPruneOff(t, s.Config, kc) })
	t.Run("an object moved to another add-on is not pruned", func(t *testing.T) { testMove(t, s.Config, kc) })
	t.Run("CRD and custom resource in one add-on", func(t *testing.T) { testCRD(t, s.Config) })
	t.Run("an object the API server rejects", func(t *testing.T) { testRejected(t, s.Config) })
	t.Run("a Deployment that cannot become ready", func(t *testing.T) { testNotReady(t, s.Config) })
	t.Run("a Job that fails", func(t *testing.T) { testFailedJob(t, s.Config) })
	t.Run("a run of Concurrent add-ons is waited for at once", func(t *testing.T) { testConcurrent(t, s.Config, kc) })
	t.Run("stage, health, and a Job recreated when its template changes", func(t *testing.T) { testStageHealthRecreate(t, s.Config, kc) })
}

// testStageHealthRecreate: Stage applies and records without waiting;
// Health says which objects are not ready; a Job of Recreate whose pod
// template changed (a field that cannot change) is planned as configured,
// then deleted and created again, while a Job not in Recreate fails.
func testStageHealthRecreate(t *testing.T, cfg *rest.Config, kc kubernetes.Interface) {
	ctx := ctxFor(t, 3*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: true, ReadyTimeout: 20 * time.Second})
	job := func(arg string) string {
		return `apiVersion: v1
kind: Namespace
metadata: {name: recreate}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: recreate}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: "example.invalid/none:1", args: [` + arg + `]}]
`
	}
	add := func(arg string, recreate bool) []addons.Addon {
		a := addons.Addon{Name: "recreate", Objects: decode(t, "recreate.yaml", job(arg))}
		if recreate {
			a.Recreate = []addons.ObjectRef{{Group: "batch", Version: "v1", Kind: "Job", Namespace: "recreate", Name: "migrate"}}
		}
		return []addons.Addon{a}
	}
	// Staged: applied and recorded, not waited for (the Job never runs:
	// no nodes).
	cs, err := h.Stage(ctx, add("one", true))
	if err != nil || cs.Count(addons.Create) != 2 {
		t.Fatalf("stage: %v, %+v", err, cs)
	}
	health, err := h.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(health, func(h addons.Health) bool { return h.Name == "recreate" })
	if i < 0 || health[i].Objects != 2 || health[i].Ready() || len(health[i].NotReady) != 1 || !strings.Contains(health[i].NotReady[0], "migrate") {
		t.Fatalf("health %+v: want the add-on recorded, its Job not ready", health)
	}
	before, err := kc.BatchV1().Jobs("recreate").Get(ctx, "migrate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A changed template: not in Recreate, refused as it is.
	if _, err := h.Plan(ctx, add("two", false)); err == nil || !strings.Contains(err.Error(), "immutable") {
		t.Fatalf("plan of a changed Job not in Recreate: %v, want the API server's refusal", err)
	}
	plan, err := h.Plan(ctx, add("two", true))
	if err != nil {
		t.Fatal(err)
	}
	if ch := find(plan.Addons[0], "Job recreate/migrate"); ch.Action != addons.Configure || !strings.Contains(ch.Summary, "deleted and created again") {
		t.Errorf("plan of a changed Job in Recreate: %+v", ch)
	}
	if _, err := h.Stage(ctx, add("two", true)); err != nil {
		t.Fatalf("stage of a changed Job in Recreate: %v", err)
	}
	after, err := kc.BatchV1().Jobs("recreate").Get(ctx, "migrate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID == before.UID || !slices.Equal(after.Spec.Template.Spec.Containers[0].Args, []string{"two"}) {
		t.Errorf("the Job was not created again with the new template: UID %s → %s, args %v", before.UID, after.UID, after.Spec.Template.Spec.Containers[0].Args)
	}
}

// harness is an engine with its progress lines and logs recorded.
type harness struct {
	*addons.Engine
	mu       sync.Mutex
	progress []string
	logs     bytes.Buffer
}

func newHarness(t *testing.T, cfg *rest.Config, opts addons.Options) *harness {
	t.Helper()
	h := &harness{}
	opts.Log = slog.New(slog.NewTextHandler(&syncWriter{h: h}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Progress = func(addon, msg string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.progress = append(h.progress, "addon "+addon+": "+msg)
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = time.Minute
	}
	e, err := addons.NewForConfig(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.Engine = e
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("engine log:\n%s", h.logs.String())
		}
	})
	return h
}

type syncWriter struct{ h *harness }

func (w *syncWriter) Write(p []byte) (int, error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.logs.Write(p)
}

// takeProgress returns the progress lines since the last call.
func (h *harness) takeProgress() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.progress
	h.progress = nil
	return p
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// decode reads a manifest named name.
func decode(t *testing.T, name, manifest string) []addons.Object {
	t.Helper()
	objs, err := addons.Decode(name, []byte(manifest), addons.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// actions is "<action> <object>" of each change, in order.
func actions(ac addons.AddonChanges) []string {
	var out []string
	for _, c := range ac.Changes {
		out = append(out, string(c.Action)+" "+c.Object.String())
	}
	return out
}

func find(ac addons.AddonChanges, object string) addons.Change {
	for _, c := range ac.Changes {
		if c.Object.String() == object {
			return c
		}
	}
	return addons.Change{}
}

func configMap(ns, name string, data map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n", name)
	if ns != "" {
		fmt.Fprintf(&b, "  namespace: %s\n", ns)
	}
	if len(data) > 0 {
		b.WriteString("data:\n")
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %s: %q\n", k, data[k])
		}
	}
	return b.String()
}

// resourceVersions are the resourceVersions of the add-on's ConfigMaps and
// Deployments in namespace ns and of its inventory. Only the add-on's: the
// controller manager adds kube-root-ca.crt to a new namespace when it gets
// to it, which may be during a re-apply.
func resourceVersions(t *testing.T, ctx context.Context, kc kubernetes.Interface, ns, addon string) map[string]string {
	t.Helper()
	rv := map[string]string{}
	ours := metav1.ListOptions{LabelSelector: addons.LabelAddon + "=" + addon}
	cms, err := kc.CoreV1().ConfigMaps(ns).List(ctx, ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		rv["ConfigMap "+c.Name] = c.ResourceVersion
	}
	deps, err := kc.AppsV1().Deployments(ns).List(ctx, ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		rv["Deployment "+d.Name] = d.ResourceVersion
	}
	inv, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, addons.InventoryName(addon), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv["inventory"] = inv.ResourceVersion
	return rv
}

func testApplyAndPrune(t *testing.T, cfg *rest.Config, kc kubernetes.Interface) {
	ctx := ctxFor(t, 3*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: true})
	const ns = "e2e-apply"
	manifest := func(x string, withB bool) string {
		docs := []string{
			"apiVersion: v1\nkind: Namespace\nmetadata: {name: " + ns + "}\n",
			configMap(ns, "a", map[string]string{"x": x}),
			"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: zero, namespace: " + ns + "}\n" +
				"spec:\n  replicas: 0\n  selector: {matchLabels: {app: zero}}\n  template:\n    metadata: {labels: {app: zero}}\n" +
				"    spec: {containers: [{name: c, image: 'example.invalid/zero:1'}]}\n",
			"apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa, namespace: " + ns + "}\n",
		}
		if withB {
			docs = append(docs, configMap(ns, "b", map[string]string{"color": "blue"}))
		}
		return strings.Join(docs, "---\n")
	}
	demo := func(x string, withB bool) []addons.Addon {
		return []addons.Addon{{Name: "demo", Objects: decode(t, "demo.yaml", manifest(x, withB))}}
	}

	// A plan before anything is applied: everything is created; what lives
	// in the new namespace cannot be dry-run yet.
	plan, err := h.Plan(ctx, demo("1", true))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"create Namespace e2e-apply", "create ServiceAccount e2e-apply/sa", "create ConfigMap e2e-apply/a", "create ConfigMap e2e-apply/b", "create Deployment e2e-apply/zero"}
	if diff := cmp.Diff(want, actions(plan.Addons[0])); diff != "" {
		t.Fatalf("first plan (-want +got):\n%s", diff)
	}
	if got := find(plan.Addons[0], "ConfigMap e2e-apply/a").Summary; got != "not dry-run: its Namespace is created first" {
		t.Errorf("summary of an object in a new namespace: %q", got)
	}

	// Apply creates everything, and says so.
	cs, err := h.Apply(ctx, demo("1", true))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, actions(cs.Addons[0])); diff != "" {
		t.Errorf("first apply (-want +got):\n%s", diff)
	}
	wantProgress := []string{
		"addon demo: Deployment e2e-apply/zero rolled out (0/0)",
		"addon demo: 5 objects applied (5 created, 0 configured, 0 unchanged)",
	}
	// Lines saying what is still awaited appear only on a slow machine.
	progress := slices.DeleteFunc(h.takeProgress(), func(l string) bool { return strings.Contains(l, ": waiting for ") })
	if diff := cmp.Diff(wantProgress, progress); diff != "" {
		t.Errorf("progress (-want +got):\n%s", diff)
	}
	a, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Labels[addons.LabelAddon] != "demo" || a.Data["x"] != "1" {
		t.Errorf("ConfigMap a: labels %v, data %v", a.Labels, a.Data)
	}
	if installed, err := h.Installed(ctx); err != nil || !slices.Contains(installed, "demo") {
		t.Errorf("Installed: %v, %v; want demo in it", installed, err)
	}

	// The same again: the plan is empty, and applying changes nothing in
	// the cluster (no resourceVersion moves, the inventory's included).
	plan, err = h.Plan(ctx, demo("1", true))
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Empty() {
		var b strings.Builder
		plan.Render(&b)
		t.Errorf("plan of what is applied is not empty:\n%s", b.String())
	}
	before := resourceVersions(t, ctx, kc, ns, "demo")
	if len(before) != 4 {
		t.Fatalf("the add-on's objects and inventory: %v, want 2 ConfigMaps, a Deployment and the inventory", before)
	}
	cs, err = h.Apply(ctx, demo("1", true))
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.Addons[0].Summary(); got != "5 objects applied (0 created, 0 configured, 5 unchanged)" {
		t.Errorf("re-apply: %s", got)
	}
	if diff := cmp.Diff(before, resourceVersions(t, ctx, kc, ns, "demo")); diff != "" {
		t.Errorf("a re-apply changed objects (-before +after):\n%s", diff)
	}
	h.takeProgress()

	// A change in the add-on: the plan shows the field, apply configures.
	plan, err = h.Plan(ctx, demo("2", true))
	if err != nil {
		t.Fatal(err)
	}
	ch := find(plan.Addons[0], "ConfigMap e2e-apply/a")
	if ch.Action != addons.Configure || ch.Summary != "data.x: 1 → 2" || !slices.Equal(ch.Fields, []string{"data.x"}) {
		t.Errorf("plan of a changed field: %+v", ch)
	}
	if n := plan.Count(addons.Unchanged); n != 4 {
		t.Errorf("%d unchanged in the plan, want 4", n)
	}

	// Drift: someone else changes a field rigger applied.
	b, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Data["color"] = "red"
	if _, err := kc.CoreV1().ConfigMaps(ns).Update(ctx, b, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	plan, err = h.Plan(ctx, demo("2", true))
	if err != nil {
		t.Fatal(err)
	}
	if ch := find(plan.Addons[0], "ConfigMap e2e-apply/b"); ch.Action != addons.Configure || ch.Summary != "data.color: red → blue" {
		t.Errorf("plan of a drifted object: %+v", ch)
	}
	cs, err = h.Apply(ctx, demo("2", true))
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.Addons[0].Summary(); got != "5 objects applied (0 created, 2 configured, 3 unchanged)" {
		t.Errorf("apply of a change and a drift: %s", got)
	}
	b, err = kc.CoreV1().ConfigMaps(ns).Get(ctx, "b", metav1.GetOptions{})
	if err != nil || b.Data["color"] != "blue" {
		t.Errorf("drift not repaired: %v, %v", b.Data, err)
	}

	// Someone else's ConfigMap in the namespace, even with rigger's label
	// and a name like the add-on's, is not in the inventory: never pruned.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b-copy", Namespace: ns, Labels: map[string]string{addons.LabelAddon: "demo"}}}
	if _, err := kc.CoreV1().ConfigMaps(ns).Create(ctx, other, metav1.CreateOptions{FieldManager: "someone"}); err != nil {
		t.Fatal(err)
	}
	// ServiceAccount sa, in the inventory, is deleted and created again by
	// someone else (without rigger's label): not rigger's any more.
	if err := kc.CoreV1().ServiceAccounts(ns).Delete(ctx, "sa", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa", Namespace: ns}}
	if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{FieldManager: "someone"}); err != nil {
		t.Fatal(err)
	}

	// b and sa leave the add-on: b is pruned, sa is left, b-copy untouched.
	withoutSA := func() []addons.Addon {
		d := demo("2", false)
		d[0].Objects = slices.DeleteFunc(d[0].Objects, func(o addons.Object) bool { return o.GetKind() == "ServiceAccount" })
		return d
	}
	plan, err = h.Plan(ctx, withoutSA())
	if err != nil {
		t.Fatal(err)
	}
	if ch := find(plan.Addons[0], "ConfigMap e2e-apply/b"); ch.Action != addons.Prune {
		t.Errorf("plan of a removed object: %+v", ch)
	}
	if ch := find(plan.Addons[0], "ServiceAccount e2e-apply/sa"); ch.Action != addons.Orphan || !strings.Contains(ch.Summary, "no rigger.io/addon label") {
		t.Errorf("plan of a removed object someone else re-created: %+v", ch)
	}
	cs, err = h.Apply(ctx, withoutSA())
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.Addons[0].Summary(); got != "3 objects applied (0 created, 0 configured, 3 unchanged), 1 pruned, 1 left in the cluster" {
		t.Errorf("apply with removed objects: %s", got)
	}
	if p := h.takeProgress(); len(p) == 0 || p[len(p)-1] != "addon demo: 3 objects applied (0 created, 0 configured, 3 unchanged), 1 pruned, 1 left in the cluster" {
		t.Errorf("progress: %q", p)
	}
	if _, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap b was not pruned: %v", err)
	}
	for _, get := range []func() error{
		func() error { _, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "b-copy", metav1.GetOptions{}); return err },
		func() error {
			_, err := kc.CoreV1().ServiceAccounts(ns).Get(ctx, "sa", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Errorf("an object rigger does not own was touched: %v", err)
		}
	}
	inv, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, addons.InventoryName("demo"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{`"name":"b"`, `"name":"sa"`} {
		if strings.Contains(inv.Data["objects"], gone) {
			t.Errorf("the inventory still lists %s:\n%s", gone, inv.Data["objects"])
		}
	}

	// The add-on goes: Remove deletes what rigger applied, then the
	// inventory.
	plan2, err := h.PlanRemove(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	wantRemove := []string{"prune Deployment e2e-apply/zero", "prune ConfigMap e2e-apply/a", "prune Namespace e2e-apply"}
	if diff := cmp.Diff(wantRemove, actions(plan2)); diff != "" {
		t.Errorf("plan of the removal (-want +got):\n%s", diff)
	}
	removed, err := h.Remove(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantRemove, actions(removed)); diff != "" {
		t.Errorf("removal (-want +got):\n%s", diff)
	}
	if installed, err := h.Installed(ctx); err != nil || slices.Contains(installed, "demo") {
		t.Errorf("Installed after Remove: %v, %v", installed, err)
	}
	nsObj, err := kc.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err == nil && nsObj.DeletionTimestamp == nil {
		t.Errorf("namespace %s is not being deleted", ns)
	}
}

func testPruneOff(t *testing.T, cfg *rest.Config, kc kubernetes.Interface) {
	ctx := ctxFor(t, 2*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: false})
	const ns = "default"
	set := func(names ...string) []addons.Addon {
		var docs []string
		for _, n := range names {
			docs = append(docs, configMap(ns, n, nil))
		}
		return []addons.Addon{{Name: "keep", Objects: decode(t, "keep.yaml", strings.Join(docs, "---\n"))}}
	}
	if _, err := h.Apply(ctx, set("keep-1", "keep-2")); err != nil {
		t.Fatal(err)
	}
	plan, err := h.Plan(ctx, set("keep-1"))
	if err != nil {
		t.Fatal(err)
	}
	if ch := find(plan.Addons[0], "ConfigMap default/keep-2"); ch.Action != addons.Orphan || !strings.Contains(ch.Summary, "rigger.addons.prune is false") {
		t.Errorf("plan with pruning off: %+v", ch)
	}
	cs, err := h.Apply(ctx, set("keep-1"))
	if err != nil {
		t.Fatal(err)
	}
	if n := cs.Count(addons.Prune); n != 0 {
		t.Errorf("%d pruned with pruning off", n)
	}
	if _, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "keep-2", metav1.GetOptions{}); err != nil {
		t.Errorf("pruning off, and keep-2 is gone: %v", err)
	}
	inv, err := kc.CoreV1().ConfigMaps("kube-system").Get(ctx, addons.InventoryName("keep"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(inv.Data["objects"], "keep-2") {
		t.Errorf("the inventory still lists keep-2, which rigger no longer applies:\n%s", inv.Data["objects"])
	}
}

func testMove(t *testing.T, cfg *rest.Config, kc kubernetes.Interface) {
	ctx := ctxFor(t, 2*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: true})
	m := func() []addons.Object { return decode(t, "m.yaml", configMap("default", "moving", nil)) }
	if _, err := h.Apply(ctx, []addons.Addon{{Name: "move-from", Objects: m()}, {Name: "move-to"}}); err != nil {
		t.Fatal(err)
	}
	cs, err := h.Apply(ctx, []addons.Addon{{Name: "move-from"}, {Name: "move-to", Objects: m()}})
	if err != nil {
		t.Fatal(err)
	}
	if n := cs.Count(addons.Prune); n != 0 {
		t.Errorf("an object that moved between add-ons was pruned")
	}
	got, err := kc.CoreV1().ConfigMaps("default").Get(ctx, "moving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := got.Labels[addons.LabelAddon]; l != "move-to" {
		t.Errorf("the moved object is labelled for add-on %q, want move-to", l)
	}
	// Removing the add-on it left does not delete it either.
	if _, err := h.Remove(ctx, "move-from"); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().ConfigMaps("default").Get(ctx, "moving", metav1.GetOptions{}); err != nil {
		t.Errorf("removing the add-on an object left deleted it: %v", err)
	}
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.e2e.rigger.io}
spec:
  group: e2e.rigger.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
`

func testCRD(t *testing.T, cfg *rest.Config) {
	ctx := ctxFor(t, 2*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: true})
	// The custom resource comes first in the manifest and has no
	// namespace: the engine orders it after its CRD and puts it in
	// "default".
	manifest := "apiVersion: e2e.rigger.io/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: 3}\n---\n" + widgetCRD
	set := []addons.Addon{{Name: "widgets", Objects: decode(t, "widgets.yaml", manifest)}}
	plan, err := h.Plan(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"create CustomResourceDefinition widgets.e2e.rigger.io", "create Widget default/w"}
	if diff := cmp.Diff(want, actions(plan.Addons[0])); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if got := find(plan.Addons[0], "Widget default/w").Summary; got != "not dry-run: its CustomResourceDefinition is created first" {
		t.Errorf("summary of the custom resource: %q", got)
	}
	cs, err := h.Apply(ctx, set)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, actions(cs.Addons[0])); diff != "" {
		t.Errorf("apply (-want +got):\n%s", diff)
	}
	if p := h.takeProgress(); !slices.Contains(p, "addon widgets: CustomResourceDefinition widgets.e2e.rigger.io established") {
		t.Errorf("progress: %q", p)
	}
	// Now that the CRD is served, the custom resource is dry-run like
	// anything else.
	plan, err = h.Plan(ctx, []addons.Addon{{Name: "widgets", Objects: decode(t, "widgets.yaml", strings.Replace(manifest, "size: 3", "size: 4", 1))}})
	if err != nil {
		t.Fatal(err)
	}
	if ch := find(plan.Addons[0], "Widget default/w"); ch.Action != addons.Configure || ch.Summary != "spec.size: 3 → 4" {
		t.Errorf("plan of a changed custom resource: %+v", ch)
	}
}

func testRejected(t *testing.T, cfg *rest.Config) {
	ctx := ctxFor(t, 2*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: true})
	tests := []struct {
		name     string
		manifest string
		object   string
		source   string
		message  string
	}{
		{
			name: "invalid Deployment",
			manifest: configMap("default", "fine", nil) + "---\n# a Deployment without containers\n" +
				"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: broken}\nspec:\n  selector: {matchLabels: {app: b}}\n  template:\n    metadata: {labels: {app: b}}\n    spec: {containers: []}\n",
			object:  "Deployment default/broken",
			source:  "broken.yaml: document 2 at line 8",
			message: "spec.template.spec.containers: Required value",
		},
		{
			name:     "misspelled field (strict validation)",
			manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typo}\ndatta: {a: b}\n",
			object:   "ConfigMap default/typo",
			source:   "broken.yaml: document 1 at line 1",
			message:  ".datta: field not declared in schema",
		},
		{
			name:     "kind the cluster does not serve",
			manifest: "apiVersion: nothing.example.com/v1\nkind: Gizmo\nmetadata: {name: g}\n",
			object:   "Gizmo g",
			source:   "broken.yaml: document 1 at line 1",
			message:  "the cluster serves no Gizmo in API version nothing.example.com/v1 (is its CustomResourceDefinition installed?)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := []addons.Addon{{Name: "broken", Objects: decode(t, "broken.yaml", tt.manifest)}}
			for _, dryRun := range []bool{true, false} {
				var err error
				if dryRun {
					_, err = h.Plan(ctx, set)
				} else {
					_, err = h.Apply(ctx, set)
				}
				var ae *addons.ApplyError
				if !errors.As(err, &ae) {
					t.Fatalf("dry run %v: got %v, want an *ApplyError", dryRun, err)
				}
				if ae.Addon != "broken" || ae.Object.String() != tt.object || ae.Source.String() != tt.source || !strings.Contains(err.Error(), tt.message) {
					t.Errorf("dry run %v: got %v\nwant it to name %s, %s and say %q", dryRun, err, tt.object, tt.source, tt.message)
				}
			}
		})
	}
}

func testNotReady(t *testing.T, cfg *rest.Config) {
	ctx := ctxFor(t, 2*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: true, ReadyTimeout: 15 * time.Second})
	manifest := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: stuck, namespace: default}\n" +
		"spec:\n  replicas: 1\n  selector: {matchLabels: {app: stuck}}\n  template:\n    metadata: {labels: {app: stuck}}\n" +
		"    spec: {containers: [{name: c, image: 'example.invalid/stuck:1'}]}\n"
	start := time.Now()
	_, err := h.Apply(ctx, []addons.Addon{{Name: "stuck", Objects: decode(t, "stuck.yaml", manifest)}})
	var nr *addons.NotReadyError
	if !errors.As(err, &nr) {
		t.Fatalf("got %v, want a *NotReadyError", err)
	}
	t.Logf("the error: %v", err)
	if took := time.Since(start); took > 45*time.Second {
		t.Errorf("the wait took %s with a ready timeout of 15s", took)
	}
	if nr.Addon != "stuck" || nr.Object.String() != "Deployment default/stuck" || nr.Status != "InProgress" {
		t.Errorf("not ready: add-on %q, object %s, status %s", nr.Addon, nr.Object, nr.Status)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the error is not a timeout: %v", err)
	}
	if !slices.ContainsFunc(nr.Conditions, func(c addons.Condition) bool {
		return c.Type == "Available" && c.Status == "False" && c.Reason == "MinimumReplicasUnavailable"
	}) {
		t.Errorf("conditions %v lack Available=False MinimumReplicasUnavailable", nr.Conditions)
	}
	if !strings.Contains(err.Error(), "condition Available=False MinimumReplicasUnavailable") {
		t.Errorf("the message does not carry the condition: %v", err)
	}
	if !slices.ContainsFunc(nr.Events, func(e string) bool { return strings.Contains(e, "FailedScheduling") }) {
		t.Errorf("events %q lack the pod's FailedScheduling", nr.Events)
	}
	// A wait longer than 10s says what it waits for.
	if p := h.takeProgress(); !slices.Contains(p, "addon stuck: waiting for Deployment default/stuck: Available: 0/1") {
		t.Errorf("progress %q does not say what is awaited", p)
	}
}

// testConcurrent: the add-ons of a run of Concurrent ones are all applied
// before any is waited for, so that one that never becomes ready holds up
// none of the others, and the failures of all are returned; the add-on
// after the run, which waits for it, is not applied.
func testConcurrent(t *testing.T, cfg *rest.Config, kc kubernetes.Interface) {
	ctx := ctxFor(t, 2*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: true, ReadyTimeout: 10 * time.Second})
	stuck := func(name string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: " + name + ", namespace: default}\n" +
			"spec:\n  replicas: 1\n  selector: {matchLabels: {app: " + name + "}}\n  template:\n    metadata: {labels: {app: " + name + "}}\n" +
			"    spec: {containers: [{name: c, image: 'example.invalid/stuck:1'}]}\n"
	}
	want := []addons.Addon{
		{Name: "run-a", Objects: decode(t, "a.yaml", stuck("stuck-a")), Concurrent: true},
		{Name: "run-b", Objects: decode(t, "b.yaml", configMap("default", "run-b", nil)+"---\n"+stuck("stuck-b")), Concurrent: true},
		{Name: "run-c", Objects: decode(t, "c.yaml", configMap("default", "run-c", nil)), Concurrent: true},
		{Name: "after", Objects: decode(t, "after.yaml", configMap("default", "after-run", nil))},
	}
	cs, err := h.Apply(ctx, want)
	var nr *addons.NotReadyError
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "Deployment default/stuck-a") || !strings.Contains(err.Error(), "Deployment default/stuck-b") {
		t.Fatalf("got %v; want the NotReadyErrors of both stuck Deployments", err)
	}
	var names []string
	for _, ac := range cs.Addons {
		names = append(names, ac.Name)
	}
	if !slices.Equal(names, []string{"run-a", "run-b", "run-c"}) {
		t.Errorf("changes of add-ons %v; want the run's three, in order", names)
	}
	if _, err := kc.CoreV1().ConfigMaps("default").Get(ctx, "run-c", metav1.GetOptions{}); err != nil {
		t.Errorf("the run's last add-on, after two that never became ready: %v", err)
	}
	if _, err := kc.CoreV1().ConfigMaps("default").Get(ctx, "after-run", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the add-on after a failed run was applied (%v)", err)
	}
	// Ready (the stuck Deployments gone): the run, then the add-on after.
	want[0].Objects = decode(t, "a.yaml", configMap("default", "run-a", nil))
	want[1].Objects = decode(t, "b.yaml", configMap("default", "run-b", nil))
	h.takeProgress()
	if _, err := h.Apply(ctx, want); err != nil {
		t.Fatal(err)
	}
	p := h.takeProgress()
	summary := func(addon string) int {
		return slices.IndexFunc(p, func(m string) bool {
			return strings.HasPrefix(m, "addon "+addon+": ") && strings.Contains(m, " applied (")
		})
	}
	after := summary("after")
	for _, a := range []string{"run-a", "run-b", "run-c"} {
		if i := summary(a); i < 0 || i > after {
			t.Errorf("progress %q: %s not done before the add-on after the run", p, a)
		}
	}
	for _, a := range []string{"run-a", "run-b"} {
		if !slices.ContainsFunc(p, func(m string) bool { return strings.HasPrefix(m, "addon "+a+": ") && strings.Contains(m, "1 pruned") }) {
			t.Errorf("progress %q: %s did not prune its Deployment", p, a)
		}
	}
}

// testFailedJob: a Job that fails (its deadline passes with no node to run
// on) stops the wait at once, long before the ready timeout.
func testFailedJob(t *testing.T, cfg *rest.Config) {
	ctx := ctxFor(t, 2*time.Minute)
	h := newHarness(t, cfg, addons.Options{Prune: true, ReadyTimeout: time.Minute})
	manifest := "apiVersion: batch/v1\nkind: Job\nmetadata: {name: doomed, namespace: default}\n" +
		"spec:\n  activeDeadlineSeconds: 1\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n" +
		"      containers: [{name: c, image: 'example.invalid/doomed:1'}]\n"
	start := time.Now()
	_, err := h.Apply(ctx, []addons.Addon{{Name: "doomed", Objects: decode(t, "doomed.yaml", manifest)}})
	var nr *addons.NotReadyError
	if !errors.As(err, &nr) {
		t.Fatalf("got %v, want a *NotReadyError", err)
	}
	t.Logf("the error: %v", err)
	if took := time.Since(start); took > 40*time.Second {
		t.Errorf("a failed Job was waited for %s", took)
	}
	if nr.Status != "Failed" || nr.Err != nil || nr.Object.String() != "Job default/doomed" {
		t.Errorf("got status %s, cause %v, object %s; want Failed, none, Job default/doomed", nr.Status, nr.Err, nr.Object)
	}
	if !slices.ContainsFunc(nr.Conditions, func(c addons.Condition) bool { return c.Type == "Failed" && c.Status == "True" }) {
		t.Errorf("conditions %v lack Failed=True", nr.Conditions)
	}
}
