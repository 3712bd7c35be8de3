// Package storedapi finds the objects etcd holds at API versions that the
// Kubernetes minor version an upgrade goes to no longer serves. An API
// server writes each object at its resource's storage version and reads it
// back at whatever version it was written; an object written at a beta
// version before its resource went GA stays stored at that version until
// something writes it again. Once a minor no longer serves that version
// (its types may be gone from the API server altogether), the object is at
// best unreadable through the API and at worst breaks the list of its
// resource. Kubernetes asks for such objects to be written again (storage
// version migration) before the upgrade; rigger refuses the upgrade until
// they are.
//
// The versions come from k8s.io/api's own lifecycle declarations
// (zz_generated.go, written by hack/api-removals); the objects are read
// from etcd's keys, each value's stored apiVersion decoded from its
// envelope (protobuf, as the API server writes built-in kinds, or JSON).
package storedapi

//go:generate go run ../../hack/api-removals -out zz_generated.go

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// API is an API version of a stored kind and the Kubernetes minor version
// (1.Removed) from which it is no longer served.
type API struct {
	Group, Version, Kind string
	// Resource is the kind's resource, which names its etcd keys.
	Resource string
	Removed  int
	// Replacement is the version Kubernetes names to use instead, when it
	// names one.
	Replacement string
}

// GroupVersion is the API version as an object's apiVersion spells it.
func (a API) GroupVersion() string {
	return schema.GroupVersion{Group: a.Group, Version: a.Version}.String()
}

// GroupResource is the resource as kubectl names it (ipaddresses.networking.k8s.io).
func (a API) GroupResource() string {
	return schema.GroupResource{Group: a.Group, Resource: a.Resource}.String()
}

// Removed is the API versions that the minor versions after from up to to
// no longer serve: those an upgrade from 1.from to 1.to takes away.
func Removed(from, to int) []API {
	var apis []API
	for _, a := range removed {
		if a.Removed > from && a.Removed <= to {
			apis = append(apis, a)
		}
	}
	return apis
}

// etcdResource is the key prefix of the resources whose etcd keys are not
// named by the resource (Kubernetes' test/integration/etcd/data.go lists
// every resource's path).
var etcdResource = map[string]string{
	"podsecuritypolicies": "podsecuritypolicy",
}

// Object is an object etcd stores at a removed API version.
type Object struct {
	API API
	// Key is its etcd key; Namespace (of a namespaced kind) and Name are
	// read from it.
	Key, Namespace, Name string
}

// Found is what a scan found.
type Found struct {
	// From and To are the minor versions of the upgrade scanned for.
	From, To int
	// Objects are those stored at an API version the upgrade takes away,
	// at most MaxListed of them; More counts the rest.
	Objects []Object
	More    int
	// Encrypted counts the values of the scanned resources that are
	// encrypted at rest (secrets encryption configured for them), whose
	// version could not be read; EncryptedResources names their
	// resources (as GroupResource does), sorted.
	Encrypted          int
	EncryptedResources []string `json:",omitempty"`
	// Resources are the resources (as GroupResource names them) of every
	// object found, listed or counted in More, sorted.
	Resources []string `json:",omitempty"`
	// WriteAt gives, for each of Resources that the running API servers
	// serve, the API version (as apiVersion spells it) through which its
	// objects are written again (WriteAgain); a resource that no version
	// of theirs serves is not in it (Served).
	WriteAt map[string]string `json:",omitempty"`
}

// Unwritable are the listed objects whose resource the running API
// servers do not serve (not in WriteAt): they cannot be written again
// through the API.
func (f *Found) Unwritable() []Object {
	var out []Object
	for _, o := range f.Objects {
		if f.WriteAt[o.API.GroupResource()] == "" {
			out = append(out, o)
		}
	}
	return out
}

// Writable reports whether every resource found is served by the running
// API servers, so that every object found can be written again.
func (f *Found) Writable() bool {
	if len(f.Unwritable()) > 0 {
		return false
	}
	for _, r := range f.Resources {
		if f.WriteAt[r] == "" {
			return false
		}
	}
	return true
}

// sharedStorage are the resources of removed API versions whose objects
// are stored as those of another group's resource, at a version every
// minor serves: events.k8s.io's Events are the core group's, stored as
// v1 Events. Their keys are not read: none can be stored at the removed
// version, and whoever may create Events (any tenant) could make the
// scan read millions.
var sharedStorage = map[string]bool{"events.events.k8s.io": true}

// Limits of a scan.
const (
	// MaxListed bounds the objects a scan lists.
	MaxListed = 50
	// pageSize bounds the values one read returns, and so the memory a
	// scan holds: an object is at most etcd's request size (1.5 MiB).
	pageSize = 50
)

// Scan reads, through kv, the etcd keys of the resources of apis under
// prefix (the API server's --etcd-prefix, /registry by default), and
// returns those whose value is stored at one of apis' versions.
func Scan(ctx context.Context, kv clientv3.KV, prefix string, from, to int, apis []API) (*Found, error) {
	f := &Found{From: from, To: to}
	byResource := map[string][]API{}
	var resources []string
	for _, a := range apis {
		if sharedStorage[a.GroupResource()] {
			continue
		}
		if _, ok := byResource[a.Resource]; !ok {
			resources = append(resources, a.Resource)
		}
		byResource[a.Resource] = append(byResource[a.Resource], a)
	}
	for _, res := range resources {
		dir := strings.TrimSuffix(prefix, "/") + "/" + res + "/"
		if r, ok := etcdResource[res]; ok {
			dir = strings.TrimSuffix(prefix, "/") + "/" + r + "/"
		}
		if err := scanResource(ctx, kv, dir, byResource[res], f); err != nil {
			return nil, fmt.Errorf("read %s from etcd: %w", dir, err)
		}
	}
	return f, nil
}

// scanResource adds to f the keys under dir stored at one of apis'
// versions, reading pageSize keys at a time.
func scanResource(ctx context.Context, kv clientv3.KV, dir string, apis []API, f *Found) error {
	end := clientv3.GetPrefixRangeEnd(dir)
	for key := dir; ; {
		resp, err := kv.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(pageSize), clientv3.WithSerializable())
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			apiVersion, kind, err := StoredType(kv.Value)
			if err == errEncrypted {
				f.Encrypted++
				if r := apis[0].GroupResource(); !slices.Contains(f.EncryptedResources, r) {
					f.EncryptedResources = append(f.EncryptedResources, r)
					slices.Sort(f.EncryptedResources)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("key %s: %w", kv.Key, err)
			}
			for _, a := range apis {
				if a.GroupVersion() != apiVersion || a.Kind != kind {
					continue
				}
				if r := a.GroupResource(); !slices.Contains(f.Resources, r) {
					f.Resources = append(f.Resources, r)
					slices.Sort(f.Resources)
				}
				if len(f.Objects) == MaxListed {
					f.More++
					continue
				}
				o := Object{API: a, Key: string(kv.Key)}
				parts := strings.Split(strings.TrimPrefix(o.Key, dir), "/")
				o.Name = parts[len(parts)-1]
				if len(parts) > 1 {
					o.Namespace = parts[0]
				}
				f.Objects = append(f.Objects, o)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Prefixes of a stored value: the API server's protobuf envelope
// (runtime.Unknown after a 4-byte magic) and the envelope of a value
// encrypted at rest.
var (
	protobufMagic = []byte("k8s\x00")
	encryptedMark = []byte("k8s:enc:")
)

var errEncrypted = fmt.Errorf("encrypted at rest")

// StoredType is the apiVersion and kind a stored value was written at.
func StoredType(value []byte) (apiVersion, kind string, err error) {
	switch {
	case bytes.HasPrefix(value, encryptedMark):
		return "", "", errEncrypted
	case bytes.HasPrefix(value, protobufMagic):
		var u runtime.Unknown
		if err := u.Unmarshal(value[len(protobufMagic):]); err != nil {
			return "", "", fmt.Errorf("not an object the API server wrote: %w", err)
		}
		return u.APIVersion, u.Kind, nil
	default:
		var tm struct{ APIVersion, Kind string }
		if err := json.Unmarshal(value, &tm); err != nil {
			return "", "", fmt.Errorf("not an object the API server wrote: %w", err)
		}
		return tm.APIVersion, tm.Kind, nil
	}
}
