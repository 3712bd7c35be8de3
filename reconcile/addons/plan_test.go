package addons

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// planFixture is an add-on of n ConfigMaps in default on an API server
// that answers reads of them with read(name) (nil: not found) and their
// dry runs with patched(name) (nil: the object as sent). The inventory
// does not exist.
func planFixture(t *testing.T, n int, read func(name string) error, patched func(name string) error) (*Engine, []Addon) {
	t.Helper()
	var docs []string
	for i := range n {
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c%d, namespace: default}\n", i))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := path.Base(r.URL.Path)
		err := error(apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name))
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/default/configmaps/") && r.Method == http.MethodGet:
			if e := read(name); e != nil {
				err = e
			}
		case strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/default/configmaps/") && r.Method == http.MethodPatch:
			if err = patched(name); err == nil {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.Copy(w, r.Body)
				return
			}
		}
		status := apierrors.NewInternalError(err).Status()
		if s, ok := err.(apierrors.APIStatus); ok {
			status = s.Status()
		}
		status.Kind, status.APIVersion = "Status", "v1"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Code))
		_ = json.NewEncoder(w).Encode(status)
	}))
	t.Cleanup(srv.Close)
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return New(dyn, newStaticMapper(), Options{}), []Addon{{Name: "a", Objects: objects(t, strings.Join(docs, "---\n"))}}
}

// TestPlanAtOnce: Plan dry-runs an add-on's objects at once. Each read
// waits until every object's read is under way (bounded by 10 s), which
// one object after the other never happens; the changes keep the objects'
// order.
func TestPlanAtOnce(t *testing.T) {
	const n = 4
	var arrived atomic.Int32
	all := make(chan struct{})
	read := func(name string) error {
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
			return nil
		case <-time.After(10 * time.Second):
			return fmt.Errorf("%s was read alone for 10s: the objects were not planned at once", name)
		}
	}
	e, addons := planFixture(t, n, read, func(string) error { return nil })
	cs, err := e.Plan(context.Background(), addons)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range cs.Addons[0].Changes {
		got = append(got, fmt.Sprintf("%s %s", ch.Action, ch.Object.Name))
	}
	if want := []string{"create c0", "create c1", "create c2", "create c3"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("changes %v, want %v", got, want)
	}
}

// TestPlanFirstError: when several objects are rejected, Plan's error is
// the first one's in order, whichever failed first.
func TestPlanFirstError(t *testing.T) {
	invalid := func(name string) error {
		return apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, name, field.ErrorList{field.Invalid(field.NewPath("data"), name, "bad")})
	}
	c3 := make(chan struct{})
	patched := func(name string) error {
		switch name {
		case "c1":
			select { // c3 fails first (one at a time, c3 never comes)
			case <-c3:
			case <-time.After(10 * time.Second):
			}
			return invalid(name)
		case "c3":
			defer close(c3)
			return invalid(name)
		}
		return nil
	}
	e, addons := planFixture(t, 5, func(string) error { return nil }, patched)
	_, err := e.Plan(context.Background(), addons)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Object.Name != "c1" || !ae.DryRun {
		t.Fatalf("Plan: %v; want the dry run of c1 rejected", err)
	}
}

// TestPlanAllReadsOnce: PlanAll reads each object once: the add-on's
// health is computed from the objects its dry run read, its inventory is
// read once for the prune and the health, the inventories are listed once.
func TestPlanAllReadsOnce(t *testing.T) {
	const n = 4
	var refs []ObjectRef
	for i := range n {
		refs = append(refs, ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: fmt.Sprint("c", i)})
	}
	inv, err := encodeInventory(refs)
	if err != nil {
		t.Fatal(err)
	}
	inventory := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": InventoryName("a"), "namespace": DefaultInventoryNamespace,
			"labels": map[string]any{LabelManagedBy: ManagedBy, LabelAddon: "a"}},
		"data": map[string]any{inventoryKey: inv}}
	var mu sync.Mutex
	calls := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls[r.Method+" "+r.URL.Path]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/kube-system/configmaps":
			_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "ConfigMapList", "metadata": map[string]any{},
				"items": []any{inventory}})
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/kube-system/configmaps/"+InventoryName("a"):
			_ = json.NewEncoder(w).Encode(inventory)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/default/configmaps/"):
			_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": path.Base(r.URL.Path), "namespace": "default"}})
		case r.Method == http.MethodPatch:
			_, _ = io.Copy(w, r.Body)
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path).Status())
		}
	}))
	defer srv.Close()
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, r := range refs {
		docs = append(docs, fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: default}\n", r.Name))
	}
	e := New(dyn, newStaticMapper(), Options{})
	_, health, err := e.PlanAll(context.Background(), []Addon{{Name: "a", Objects: objects(t, strings.Join(docs, "---\n"))}})
	if err != nil {
		t.Fatal(err)
	}
	if len(health) != 1 || health[0].Objects != n || !health[0].Ready() {
		t.Errorf("health %+v, want add-on a with %d objects, ready", health, n)
	}
	for call, times := range calls {
		if strings.HasPrefix(call, "GET ") && times != 1 {
			t.Errorf("%s: %d times, want once", call, times)
		}
	}
	if e.reads != nil {
		t.Error("PlanAll left its read cache on the engine: a later plan would read nothing again")
	}
}
