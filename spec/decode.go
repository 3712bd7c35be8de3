package spec

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// maxNodes bounds the YAML nodes one decode visits, aliases counted each time
// they are followed, so that a "billion laughs" document fails fast.
const maxNodes = 1 << 18

// decoder decodes a YAML node tree into the schema types, strictly: every
// problem becomes a diagnostic with its position, and decoding goes on so
// that all of them are found in one pass.
type decoder struct {
	file  string
	diags Diagnostics
	// pos holds the position of every decoded path (a mapping key's position
	// for fields and map entries, the item's for list items).
	pos map[string]Pos
	// bad holds the paths that failed to decode; validation stays quiet about them.
	bad map[string]bool
	// zero holds the paths given an explicit 0, which defaulting cannot tell from an absent key.
	zero  map[string]bool
	nodes int
	keys  map[string][]string // key name -> schema paths where it is valid, for "belongs under" hints
}

func newDecoder(file string) *decoder {
	return &decoder{file: file, pos: map[string]Pos{}, bad: map[string]bool{}, zero: map[string]bool{}}
}

func (d *decoder) errorf(n *yaml.Node, path, detail, format string, args ...any) {
	d.bad[path] = true
	d.diags = append(d.diags, Diagnostic{
		Severity: SeverityError, File: d.file, Line: n.Line, Column: n.Column,
		Path: path, Summary: fmt.Sprintf(format, args...), Detail: detail,
	})
}

// spend counts one visited node against maxNodes; false once it is spent,
// which is reported the first time.
func (d *decoder) spend(n *yaml.Node) bool {
	d.nodes++
	if d.nodes == maxNodes+1 {
		d.errorf(n, "", fmt.Sprintf("It has more than %d values; reduce the use of YAML anchors and aliases.", maxNodes),
			"the document is too large once its aliases are expanded")
	}
	return d.nodes <= maxNodes
}

// value decodes n into v (addressable) at path.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if !d.spend(n) {
		return
	}
	if n.Kind == yaml.AliasNode {
		d.value(n.Alias, v, path)
		return
	}
	if isNull(n) {
		return // an empty value leaves the default
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.value(n, v.Elem(), path)
		return
	}
	if tu, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		if !d.expectScalar(n, path, "a value") {
			return
		}
		if err := tu.UnmarshalText([]byte(n.Value)); err != nil {
			d.errorf(n, path, "", "%v", err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.structValue(n, v, path)
	case reflect.Map:
		d.mapValue(n, v, path)
	case reflect.Slice:
		d.sliceValue(n, v, path)
	case reflect.String:
		if d.expectScalar(n, path, "a string") {
			v.SetString(n.Value)
		}
	case reflect.Bool:
		if !d.expectScalar(n, path, "true or false") {
			return
		}
		b, ok := parseBool(n.Value)
		if !ok {
			d.errorf(n, path, "", "expected true or false, got %q", n.Value)
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		if !d.expectScalar(n, path, "a whole number") {
			return
		}
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, v.Type().Bits())
		if err != nil {
			d.errorf(n, path, "", "expected a whole number, got %q", n.Value)
			return
		}
		v.SetInt(i)
		if i == 0 {
			d.zero[path] = true
		}
	case reflect.Float64:
		if !d.expectScalar(n, path, "a number") {
			return
		}
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.errorf(n, path, "", "expected a number, got %q", n.Value)
			return
		}
		v.SetFloat(f)
	case reflect.Interface:
		v.Set(reflect.ValueOf(d.generic(n, path)))
	default:
		panic(fmt.Sprintf("spec: no decoder for %s at %s", v.Type(), path))
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func (d *decoder) expectScalar(n *yaml.Node, path, want string) bool {
	if n.Kind == yaml.ScalarNode {
		return true
	}
	d.errorf(n, path, "", "expected %s, got %s", want, kindName(n))
	return false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping (key: value)"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

// parseBool accepts YAML 1.2's true/false and YAML 1.1's yes/no/on/off,
// which RKE (yaml.v2) accepted too.
func parseBool(s string) (bool, bool) {
	switch strings.ToLower(s) {
	case "true", "yes", "on":
		return true, true
	case "false", "no", "off":
		return false, true
	}
	return false, false
}

// pair is one entry of a mapping.
type pair struct{ key, value *yaml.Node }

// pairs returns the entries of mapping n with YAML merge keys (`<<: *base`)
// resolved: explicit keys win over merged ones. Keys given twice are reported.
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	var out []pair
	seen := map[string]*yaml.Node{}
	var merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Tag == "!!merge" {
			merged = append(merged, d.mergeSources(val, path)...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "", "a key must be a plain word, got %s", kindName(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, join(path, k.Value), "", "key %q is given twice (first at line %d)", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		out = append(out, pair{k, val})
	}
	for _, p := range merged {
		if _, ok := seen[p.key.Value]; !ok {
			seen[p.key.Value] = p.key
			out = append(out, p)
		}
	}
	return out
}

func (d *decoder) mergeSources(n *yaml.Node, path string) []pair {
	if !d.spend(n) {
		return nil
	}
	switch {
	case n.Kind == yaml.AliasNode:
		return d.mergeSources(n.Alias, path)
	case n.Kind == yaml.MappingNode:
		return d.pairs(n, path)
	case n.Kind == yaml.SequenceNode:
		var out []pair
		for _, s := range n.Content {
			out = append(out, d.mergeSources(s, path)...)
		}
		return out
	}
	d.errorf(n, path, "", "a merge key (<<) takes a mapping or a list of mappings, got %s", kindName(n))
	return nil
}

func (d *decoder) structValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "", "expected a mapping (key: value), got %s", kindName(n))
		return
	}
	fields := fieldsOf(v.Type())
	for _, p := range d.pairs(n, path) {
		key := p.key.Value
		fpath := join(path, key)
		f, ok := fields[key]
		if !ok {
			d.unknownKey(p.key, path, key, v.Type())
			continue
		}
		d.pos[fpath] = Pos{p.key.Line, p.key.Column}
		d.value(p.value, v.FieldByIndex(f.index), fpath)
	}
}

func (d *decoder) mapValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "", "expected a mapping (key: value), got %s", kindName(n))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	for _, p := range d.pairs(n, path) {
		epath := mapKeyPath(path, p.key.Value)
		d.pos[epath] = Pos{p.key.Line, p.key.Column}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.value(p.value, elem, epath)
		v.SetMapIndex(reflect.ValueOf(p.key.Value).Convert(v.Type().Key()), elem)
	}
}

func (d *decoder) sliceValue(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		hint := ""
		if n.Kind == yaml.ScalarNode {
			hint = fmt.Sprintf("Write it as a list: [%s], or one `- %s` per line.", n.Value, n.Value)
		}
		d.errorf(n, path, hint, "expected a list, got %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, item := range n.Content {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		d.pos[ipath] = Pos{item.Line, item.Column}
		d.value(item, s.Index(i), ipath)
	}
	v.Set(s)
}

// generic decodes a free-form value: mappings become map[string]any, lists
// []any, scalars their YAML type.
func (d *decoder) generic(n *yaml.Node, path string) any {
	if !d.spend(n) {
		return nil
	}
	switch n.Kind {
	case yaml.AliasNode:
		return d.generic(n.Alias, path)
	case yaml.MappingNode:
		m := map[string]any{}
		for _, p := range d.pairs(n, path) {
			m[p.key.Value] = d.generic(p.value, mapKeyPath(path, p.key.Value))
		}
		return m
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		for i, item := range n.Content {
			l[i] = d.generic(item, fmt.Sprintf("%s[%d]", path, i))
		}
		return l
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil
		case "!!bool":
			b, _ := parseBool(n.Value)
			return b
		case "!!int":
			if i, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
				return i
			}
		case "!!float":
			if f, err := strconv.ParseFloat(n.Value, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f
			}
		}
		return n.Value
	}
	return nil
}

// unknownKey reports key, unknown in struct type t at path, with the closest
// known key or the place the key belongs.
func (d *decoder) unknownKey(k *yaml.Node, path, key string, t reflect.Type) {
	fpath := join(path, key)
	where := "at the top level"
	if path != "" {
		where = "in " + path
	}
	names := fieldNames(t)
	var detail string
	if elsewhere := d.keyLocations()[key]; len(elsewhere) > 0 && len(elsewhere) <= 3 {
		detail = fmt.Sprintf("%q belongs under %s.", key, strings.Join(elsewhere, " or "))
	} else if s := suggest(key, names); s != "" {
		detail = fmt.Sprintf("Did you mean %q?", s)
	} else {
		detail = "Known keys here: " + strings.Join(names, ", ") + "."
	}
	d.errorf(k, fpath, detail, "unknown key %q %s", key, where)
}

// keyLocations indexes every key of the schema by name: the parent paths
// where it is valid.
func (d *decoder) keyLocations() map[string][]string {
	if d.keys == nil {
		d.keys = map[string][]string{}
		var walk func(t reflect.Type, path string, depth int)
		walk = func(t reflect.Type, path string, depth int) {
			for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
				if t.Kind() == reflect.Slice {
					path += "[]"
				} else if t.Kind() == reflect.Map {
					path += ".*"
				}
				t = t.Elem()
			}
			if t.Kind() != reflect.Struct || depth > 8 {
				return
			}
			parent := path
			if parent == "" {
				parent = "the top level"
			}
			for _, name := range fieldNames(t) {
				d.keys[name] = append(d.keys[name], parent)
				walk(fieldsOf(t)[name].typ, join(path, name), depth+1)
			}
		}
		walk(reflect.TypeFor[Cluster](), "", 0)
	}
	return d.keys
}

// field is one key of a struct type.
type field struct {
	index  []int
	typ    reflect.Type
	secret bool
}

// fieldsOf maps the keys of struct type t (json tag names, inline embedded
// structs flattened) to their fields.
func fieldsOf(t reflect.Type) map[string]field {
	out := map[string]field{}
	for _, sf := range reflect.VisibleFields(t) {
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out[name] = field{index: sf.Index, typ: sf.Type, secret: secrecy(sf) != ""}
	}
	return out
}

// fieldNames lists the keys of struct type t in declaration order.
func fieldNames(t reflect.Type) []string {
	var names []string
	for _, sf := range reflect.VisibleFields(t) {
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name != "-" && name != "" {
			names = append(names, name)
		}
	}
	return names
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// mapKeyPath is the path of a map entry: `labels.zone`, or
// `labels["app.kubernetes.io/name"]` when the key is not a plain word.
func mapKeyPath(path, key string) string {
	if plainKey.MatchString(key) {
		return join(path, key)
	}
	return fmt.Sprintf("%s[%q]", path, key)
}

// suggest returns the known key closest to key, or "" when none is close.
func suggest(key string, known []string) string {
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(s)) }
	for _, k := range known {
		if norm(k) == norm(key) {
			return k
		}
	}
	best, bestDist := "", 0
	for _, k := range known {
		dist := editDistance(strings.ToLower(key), strings.ToLower(k))
		if best == "" || dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if limit := max(1, min(3, len(key)/3)); bestDist <= limit {
		return best
	}
	// A key cut short or run on: cluster_dns for cluster_dns_server.
	if len(key) >= 4 {
		for _, k := range known {
			if strings.HasPrefix(k, key) || strings.HasPrefix(key, k) {
				return k
			}
		}
	}
	return ""
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of neighbours ("imgae") cost one each.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
