package storedapi

import (
	"context"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// Served gives, for each of resources (as GroupResource names them), a
// version of its group that the API server of disc serves it at: the
// group's preferred version when that serves it, else the first of the
// others that does. A resource it does not serve is left out. Any served
// version would do: the API server stores what is written at the
// resource's storage version, whatever version it was written through.
func Served(disc discovery.DiscoveryInterface, resources []string) (map[string]string, error) {
	if len(resources) == 0 {
		return nil, nil
	}
	groups, err := disc.ServerGroups()
	if err != nil {
		return nil, fmt.Errorf("discover the API groups: %w", err)
	}
	versions := map[string][]string{}
	for _, g := range groups.Groups {
		vs := []string{g.PreferredVersion.GroupVersion}
		for _, v := range g.Versions {
			if v.GroupVersion != g.PreferredVersion.GroupVersion {
				vs = append(vs, v.GroupVersion)
			}
		}
		versions[g.Name] = vs
	}
	out := map[string]string{}
	for _, r := range resources {
		gr := schema.ParseGroupResource(r)
		for _, gv := range versions[gr.Group] {
			list, err := disc.ServerResourcesForGroupVersion(gv)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("discover the resources of %s: %w", gv, err)
			}
			if slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == gr.Resource }) {
				out[r] = gv
				break
			}
		}
	}
	return out, nil
}

// Bounds of WriteAgain.
const (
	// writePage is how many objects one list returns.
	writePage = 500
	// conflictTries bounds the writes of one object that others change
	// at the same time.
	conflictTries = 5
)

// WriteAgain writes every object of resource (as GroupResource names it)
// again, unchanged, through apiVersion, a version the API server serves
// it at (Served), as kube-storage-version-migrator does: the API server
// stores each one at its resource's storage version, whatever version
// etcd held it at, and leaves it unchanged otherwise (same spec, status
// and metadata, a new resourceVersion). An object deleted meanwhile is
// skipped; one changed meanwhile is read again and written, up to
// conflictTries times. It returns how many objects it wrote.
func WriteAgain(ctx context.Context, dyn dynamic.Interface, resource, apiVersion string) (int, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return 0, err
	}
	gvr := gv.WithResource(schema.ParseGroupResource(resource).Resource)
	all := dyn.Resource(gvr)
	written := 0
	opts := metav1.ListOptions{Limit: writePage}
	for {
		list, err := all.List(ctx, opts)
		if err != nil {
			return written, fmt.Errorf("list %s at %s: %w", resource, apiVersion, err)
		}
		for i := range list.Items {
			if err := writeOne(ctx, dyn, gvr, &list.Items[i]); err != nil {
				return written, fmt.Errorf("write %s %s again at %s: %w", resource, objectName(&list.Items[i]), apiVersion, err)
			}
			written++
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return written, nil
		}
	}
}

// writeOne writes obj again, reading it again after a conflict.
func writeOne(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if ns := obj.GetNamespace(); ns != "" {
		ri = dyn.Resource(gvr).Namespace(ns)
	}
	for try := 1; ; try++ {
		_, err := ri.Update(ctx, obj, metav1.UpdateOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) || try == conflictTries {
			return err
		}
		if obj, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
	}
}

// objectName is namespace/name, or name.
func objectName(obj *unstructured.Unstructured) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}

// CheckWritten reads, through kv, the etcd keys of resource (as
// GroupResource names it) under prefix, once WriteAgain wrote its objects
// again, and returns an error naming those still stored at an API version
// that the upgrade from 1.from to 1.to takes away; nil when none is.
func CheckWritten(ctx context.Context, kv clientv3.KV, prefix string, from, to int, resource string) error {
	var apis []API
	for _, a := range Removed(from, to) {
		if a.GroupResource() == resource {
			apis = append(apis, a)
		}
	}
	left, err := Scan(ctx, kv, prefix, from, to, apis)
	if err != nil {
		return fmt.Errorf("read etcd again after writing the objects of %s: %w", resource, err)
	}
	if len(left.Objects) == 0 {
		return nil
	}
	var keys []string
	for _, o := range left.Objects {
		keys = append(keys, o.Key+" at "+o.API.GroupVersion())
	}
	return fmt.Errorf("the objects of %s were written again, and etcd still stores %d at an API version 1.%d no longer serves: %s",
		resource, len(left.Objects)+left.More, to, strings.Join(keys, ", "))
}
