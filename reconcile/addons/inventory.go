package addons

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Labels and names rigger puts in the cluster.
const (
	// LabelAddon is on every object rigger applies and on the add-on's
	// inventory: the add-on it belongs to. An object is pruned only when it
	// carries this label with its add-on's name.
	LabelAddon = "rigger.io/addon"
	// LabelManagedBy marks the inventories (with the value ManagedBy).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is rigger's value of LabelManagedBy, and its field manager
	// by default.
	ManagedBy = "rigger"
	// InventoryPrefix starts the name of every inventory ConfigMap:
	// rigger-addon-<add-on>.
	InventoryPrefix = "rigger-addon-"
	// inventoryKey is the inventory ConfigMap's data key.
	inventoryKey = "objects"
	// maxInventoryBytes keeps the inventory under the 1 MiB a ConfigMap
	// holds, with room for its metadata.
	maxInventoryBytes = 900 << 10
)

// InventoryName is the name of add-on name's inventory ConfigMap.
func InventoryName(name string) string { return InventoryPrefix + name }

// encodeInventory writes refs as the inventory's data: a JSON list, one
// object a line, sorted, so that kubectl shows it readably and a re-apply
// of the same objects writes the same bytes.
func encodeInventory(refs []ObjectRef) (string, error) {
	refs = union(nil, refs)
	slices.SortFunc(refs, compareRefs)
	var b bytes.Buffer
	b.WriteString("[")
	for i, r := range refs {
		if i > 0 {
			b.WriteString(",")
		}
		line, err := json.Marshal(r)
		if err != nil {
			return "", err
		}
		b.WriteString("\n")
		b.Write(line)
	}
	b.WriteString("\n]\n")
	if b.Len() > maxInventoryBytes {
		return "", fmt.Errorf("the inventory of %d objects is %d bytes, more than a ConfigMap holds (%d): split the add-on", len(refs), b.Len(), maxInventoryBytes)
	}
	return b.String(), nil
}

// decodeInventory reads what encodeInventory wrote. The inventory lives in
// the cluster, where anyone with access may change it: every entry must
// name a kind and an object, and there are at most maxEntries.
func decodeInventory(data string, maxEntries int) ([]ObjectRef, error) {
	if strings.TrimSpace(data) == "" {
		return nil, nil
	}
	if len(data) > maxInventoryBytes {
		return nil, fmt.Errorf("%d bytes, more than %d", len(data), maxInventoryBytes)
	}
	var refs []ObjectRef
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&refs); err != nil {
		return nil, err
	}
	if len(refs) > maxEntries {
		return nil, fmt.Errorf("%d entries, more than %d", len(refs), maxEntries)
	}
	for i, r := range refs {
		if r.Kind == "" || r.Version == "" || r.Name == "" {
			return nil, fmt.Errorf("entry %d (%s) needs version, kind and name", i+1, r)
		}
	}
	return refs, nil
}

func compareRefs(a, b ObjectRef) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version))
}

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// inventory is an add-on's inventory as read from the cluster.
type inventory struct {
	refs []ObjectRef
	// data is the ConfigMap's data as read ("" when there is none).
	data   string
	exists bool
}

// readInventory reads add-on name's inventory; none is an empty one.
func (e *Engine) readInventory(ctx context.Context, name string) (inventory, error) {
	ref := ObjectRef{Version: "v1", Kind: "ConfigMap", Namespace: e.opts.InventoryNamespace, Name: InventoryName(name)}
	live, err := e.get(ctx, configMaps, ref)
	if err != nil || live == nil {
		return inventory{}, err
	}
	data, _, _ := unstructured.NestedString(live.Object, "data", inventoryKey)
	refs, err := decodeInventory(data, 2*DefaultMaxObjects)
	if err != nil {
		return inventory{}, fmt.Errorf("addon %s: read its inventory %s: %w (delete the ConfigMap to start a new inventory; rigger then prunes nothing it applied before)", name, ref, err)
	}
	return inventory{refs: refs, data: data, exists: true}, nil
}

// writeInventory records refs as add-on name's inventory, unless old, the
// inventory as read, holds them already. It returns the new inventory.
func (e *Engine) writeInventory(ctx context.Context, name string, old inventory, refs []ObjectRef) (inventory, error) {
	data, err := encodeInventory(refs)
	if err != nil {
		return old, fmt.Errorf("addon %s: %w", name, err)
	}
	next := inventory{refs: refs, data: data, exists: true}
	if old.exists && data == old.data {
		return next, nil
	}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":      InventoryName(name),
			"namespace": e.opts.InventoryNamespace,
			"labels":    map[string]any{LabelManagedBy: ManagedBy, LabelAddon: name},
			"annotations": map[string]any{
				"rigger.io/description": "The objects rigger applied for add-on " + name + ": those removed from the add-on are pruned through this list. Do not edit.",
			},
		},
		"data": map[string]any{inventoryKey: data},
	}}
	body, err := cm.MarshalJSON()
	if err != nil {
		return old, err
	}
	force := true
	err = retry(ctx, func() error {
		_, err := e.dyn.Resource(configMaps).Namespace(e.opts.InventoryNamespace).Patch(ctx, InventoryName(name), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: e.opts.FieldManager, Force: &force})
		return err
	})
	if err != nil {
		return old, fmt.Errorf("addon %s: write its inventory %s/%s: %w", name, e.opts.InventoryNamespace, InventoryName(name), err)
	}
	return next, nil
}

// deleteInventory deletes add-on name's inventory.
func (e *Engine) deleteInventory(ctx context.Context, name string) error {
	err := retry(ctx, func() error {
		return e.dyn.Resource(configMaps).Namespace(e.opts.InventoryNamespace).Delete(ctx, InventoryName(name), metav1.DeleteOptions{})
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("addon %s: delete its inventory: %w", name, err)
	}
	return nil
}

// Installed lists the add-ons that have an inventory in the cluster, by
// name: those rigger applied and did not remove. An installed add-on that
// is no longer wanted is removed with Remove.
func (e *Engine) Installed(ctx context.Context) ([]string, error) {
	var list *unstructured.UnstructuredList
	err := retry(ctx, func() error {
		var err error
		list, err = e.dyn.Resource(configMaps).Namespace(e.opts.InventoryNamespace).List(ctx, metav1.ListOptions{
			LabelSelector: LabelManagedBy + "=" + ManagedBy + "," + LabelAddon,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list add-on inventories: %w", err)
	}
	var names []string
	for _, cm := range list.Items {
		name, ok := strings.CutPrefix(cm.GetName(), InventoryPrefix)
		if ok && cm.GetLabels()[LabelAddon] == name {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// union is refs a then b, an object once (as b names it when both do).
func union(a, b []ObjectRef) []ObjectRef {
	in := map[objKey]int{}
	var out []ObjectRef
	for _, l := range [][]ObjectRef{a, b} {
		for _, r := range l {
			if i, ok := in[r.key()]; ok {
				out[i] = r
				continue
			}
			in[r.key()] = len(out)
			out = append(out, r)
		}
	}
	return out
}
