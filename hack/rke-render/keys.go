package main

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	v3 "github.com/rancher/rke/types"
)

// How RKE reads a key of cluster.yml (the second column of -keys).
const (
	// readYAML: gopkg.in/yaml.v2 into RKE's types, the name matched
	// exactly: the field's yaml tag, or else its Go name in lower case
	// (tolerationseconds, cacertificates, cloudprovider).
	readYAML = "yaml"
	// readJSONFold: decoded again with encoding/json, which matches the
	// field's json name in any case (rollingUpdate, rollingupdate).
	readJSONFold = "json-fold"
	// readObject: a Kubernetes object RKE decodes into its Kubernetes type
	// on its own; its keys are that type's.
	readObject = "object"
)

// objectPaths are the keys whose value cluster.ParseConfig decodes again,
// from the whole file, into a Kubernetes type: resolveCustomEncryptionConfig,
// parseAdmissionConfig, parseAuditLogConfig, parseEventRateLimit and
// parseIngressConfig in RKE's cluster/cluster.go and cluster/encryption.go.
var objectPaths = map[string]bool{
	"services.kube-api.secrets_encryption_config.custom_config": true,
	"services.kube-api.admission_configuration":                 true,
	"services.kube-api.audit_log.configuration.policy":          true,
	"services.kube-api.event_rate_limit.configuration":          true,
	"ingress.extra_envs":          true,
	"ingress.extra_volumes":       true,
	"ingress.extra_volume_mounts": true,
}

// jsonPaths are the keys whose value parseAddonConfig decodes again with
// encoding/json (through ghodss/yaml), replacing what yaml.v2 read.
var jsonPaths = map[string]bool{
	"ingress.update_strategy":       true,
	"network.update_strategy":       true,
	"monitoring.update_strategy":    true,
	"dns.update_strategy":           true,
	"dns.nodelocal.update_strategy": true,
}

// listKeys writes every key RKE's ParseConfig reads from cluster.yml, one
// per line: its path (`[]` for a list item, `.*` for a map entry) and how
// it is read (readYAML, readJSONFold or readObject), sorted.
func listKeys(w io.Writer) error {
	keys := map[string]string{}
	walkKeys(reflect.TypeFor[v3.RancherKubernetesEngineConfig](), "", readYAML, keys, 0)
	paths := make([]string, 0, len(keys))
	for p := range keys {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if _, err := fmt.Fprintf(w, "%s\t%s\n", p, keys[p]); err != nil {
			return err
		}
	}
	return nil
}

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
)

// walkKeys records the keys of type t at path, read as how says.
func walkKeys(t reflect.Type, path, how string, keys map[string]string, depth int) {
	if depth > 20 {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice:
		walkKeys(t.Elem(), path+"[]", how, keys, depth+1)
		return
	case reflect.Map:
		walkKeys(t.Elem(), path+".*", how, keys, depth+1)
		return
	case reflect.Struct:
	default:
		return
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) {
		return // a scalar (metav1.Time, intstr.IntOrString)
	}
	for _, f := range structKeys(t, how) {
		p := f.name
		if path != "" {
			p = path + "." + f.name
		}
		switch {
		case objectPaths[p]:
			keys[p] = readObject
		case jsonPaths[p]:
			keys[p] = how
			walkKeys(f.typ, p, readJSONFold, keys, depth+1)
		default:
			keys[p] = how
			walkKeys(f.typ, p, how, keys, depth+1)
		}
	}
}

type structKey struct {
	name string
	typ  reflect.Type
}

// structKeys are the keys of struct t as gopkg.in/yaml.v2 (getStructInfo)
// or encoding/json names them, inline and embedded structs flattened.
func structKeys(t reflect.Type, how string) []structKey {
	var out []structKey
	for i := range t.NumField() {
		f := t.Field(i)
		if how == readYAML {
			if f.PkgPath != "" && !f.Anonymous {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if strings.Contains(","+opts+",", ",inline,") {
				out = append(out, structKeys(f.Type, how)...)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			out = append(out, structKey{name, f.Type})
			continue
		}
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, structKeys(f.Type, how)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, structKey{name, f.Type})
	}
	return out
}
