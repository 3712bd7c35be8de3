package addons

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rigger/rigger/spec"
)

// normalize is a copy of an object as the server returns it, without what
// says nothing about its desired state: its status, and the metadata the
// server keeps (managedFields, resourceVersion, generation, uid,
// creationTimestamp, selfLink). Fields the server defaults are kept: both
// sides of a comparison come from the server, so they are defaulted alike.
func normalize(obj map[string]any) map[string]any {
	c := runtime.DeepCopyJSON(obj)
	delete(c, "status")
	if md, ok := c["metadata"].(map[string]any); ok {
		for _, f := range []string{"managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink"} {
			delete(md, f)
		}
	}
	return c
}

// fieldDiff is one difference between two objects.
type fieldDiff struct {
	// Path in the object: "spec.replicas",
	// `metadata.labels["app.kubernetes.io/name"]`,
	// "spec.template.spec.containers[name=app].image", "spec.ports[0].port".
	Path   string
	Op     string // "added", "removed", "changed" or "reordered"
	Before any
	After  any
}

// diffObjects lists how after differs from before, field by field, in
// path order.
func diffObjects(before, after map[string]any) []fieldDiff {
	var out []fieldDiff
	walk("", before, after, &out)
	return out
}

func walk(path string, a, b any, out *[]fieldDiff) {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			keys := make([]string, 0, len(av)+len(bv))
			for k := range av {
				keys = append(keys, k)
			}
			for k := range bv {
				if _, ok := av[k]; !ok {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				x, inA := av[k]
				y, inB := bv[k]
				p := joinPath(path, k)
				switch {
				case !inA:
					*out = append(*out, fieldDiff{Path: p, Op: "added", After: y})
				case !inB:
					*out = append(*out, fieldDiff{Path: p, Op: "removed", Before: x})
				default:
					walk(p, x, y, out)
				}
			}
			return
		}
	case []any:
		if bv, ok := b.([]any); ok {
			if ka, kb := nameKeys(av), nameKeys(bv); ka != nil && kb != nil {
				walkNamed(path, av, bv, ka, kb, out)
				return
			}
			if len(av) == len(bv) {
				for i := range av {
					walk(path+"["+strconv.Itoa(i)+"]", av[i], bv[i], out)
				}
				return
			}
		}
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, fieldDiff{Path: path, Op: "changed", Before: a, After: b})
	}
}

// nameKeys is the "name" of each element of a list of mappings that all
// have distinct names (containers, env, ports, volumes), or nil.
func nameKeys(l []any) []string {
	if len(l) == 0 {
		return nil
	}
	keys := make([]string, len(l))
	seen := make(map[string]bool, len(l))
	for i, e := range l {
		m, ok := e.(map[string]any)
		if !ok {
			return nil
		}
		n, ok := m["name"].(string)
		if !ok || seen[n] {
			return nil
		}
		seen[n] = true
		keys[i] = n
	}
	return keys
}

// walkNamed compares two lists of named mappings element by element.
func walkNamed(path string, a, b []any, ka, kb []string, out *[]fieldDiff) {
	for i, n := range ka {
		p := path + "[name=" + n + "]"
		if j := slices.Index(kb, n); j >= 0 {
			walk(p, a[i], b[j], out)
		} else {
			*out = append(*out, fieldDiff{Path: p, Op: "removed", Before: a[i]})
		}
	}
	for j, n := range kb {
		if !slices.Contains(ka, n) {
			*out = append(*out, fieldDiff{Path: path + "[name=" + n + "]", Op: "added", After: b[j]})
		}
	}
	// The same names in another order.
	if len(ka) == len(kb) && !slices.Equal(ka, kb) && slices.Equal(sorted(ka), sorted(kb)) {
		*out = append(*out, fieldDiff{Path: path, Op: "reordered"})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func joinPath(path, key string) string {
	if strings.ContainsAny(key, "./[] ") || key == "" {
		key = "[" + strconv.Quote(key) + "]"
		return path + key
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// maxSummaryFields is how many differences a Change's summary spells out.
const maxSummaryFields = 3

// maxShownValue is the longest value a summary shows.
const maxShownValue = 40

// summarize describes diffs for people in one line: the first few paths
// with their old and new values when those are short scalars. Values are
// never shown for a Secret, nor under a path that looks like it holds a
// secret (spec.SecretName), and a URL's credentials never (spec.RedactURLs).
func summarize(diffs []fieldDiff, secretKind bool) string {
	var parts []string
	for i, d := range diffs {
		if i == maxSummaryFields {
			parts = append(parts, fmt.Sprintf("and %d more", len(diffs)-i))
			break
		}
		hide := secretKind || spec.SecretName(d.Path)
		switch d.Op {
		case "added":
			if v, ok := shown(d.After, hide); ok {
				parts = append(parts, d.Path+": + "+v)
			} else {
				parts = append(parts, d.Path+" added")
			}
		case "removed", "reordered":
			parts = append(parts, d.Path+" "+d.Op)
		default:
			bv, bok := shown(d.Before, hide)
			av, aok := shown(d.After, hide)
			if bok && aok && bv != av {
				parts = append(parts, d.Path+": "+bv+" → "+av)
			} else {
				parts = append(parts, d.Path+" changed")
			}
		}
	}
	return strings.Join(parts, "; ")
}

// shown is v as a summary shows it, or false when it is not shown: hidden,
// not a scalar, or too long.
func shown(v any, hide bool) (string, bool) {
	if hide {
		return "", false
	}
	switch x := v.(type) {
	case string:
		x = spec.RedactURLs(x)
		if len(x) > maxShownValue || strings.ContainsAny(x, "\n\r") {
			return "", false
		}
		if x == "" || strings.ContainsAny(x, " ;→") {
			return strconv.Quote(x), true
		}
		return x, true
	case bool, int64, float64:
		return fmt.Sprint(x), true
	case nil:
		return "null", true
	}
	return "", false
}
