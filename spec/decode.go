package spec

import (
	"encoding"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/rigger/rigger/internal/clip"
	yaml "go.yaml.in/yaml/v3"
)

// Bounds of one decode, whatever the document, so that a small file cannot
// make rigger spend much time or memory: YAML's aliases repeat a value
// without writing it again. Past one of them, decoding stops with an error.
const (
	// maxNodes bounds the YAML values one decode visits, aliases counted
	// each time they are followed ("billion laughs").
	maxNodes = 1 << 18
	// maxDepth bounds how deeply values nest (aliases and pointers count
	// as a level).
	maxDepth = 64
	// maxPath bounds the length of a value's path.
	maxPath = 1024
	// maxKey bounds a key in a path: a longer one is shown by its beginning.
	maxKey = 64
	// checkEvery is how many values are decoded between two looks at
	// whether the caller gave up.
	checkEvery = 1024
	// maxObjectValues bounds the values of one free-form field (an
	// Object: secrets_encryption_config.custom_config, an audit policy, an
	// admission configuration, …), each written out as a file for the
	// nodes: writing one costs some 40 times its size (57,000 encryption
	// keys took 210 MB).
	maxObjectValues = 10000
)

// decoder decodes a YAML node tree into the schema types, strictly: every
// problem becomes a diagnostic with its position, and decoding goes on so
// that all of them are found in one pass, within the bounds above.
type decoder struct {
	file  string
	diags *collector
	// pos holds the position of every decoded path (a mapping key's position
	// for fields and map entries, the item's for list items).
	pos map[string]Pos
	// bad holds the paths that failed to decode; validation stays quiet about them.
	bad map[string]bool
	// zero holds the paths given an explicit 0, which defaulting cannot tell from an absent key.
	zero  map[string]bool
	nodes int
	depth int
	// open counts, for each anchored node, how often it is being decoded
	// now: an alias of an open node is a value inside itself.
	open map[*yaml.Node]int
	// cancelled is the caller's ctx.Err, looked at every checkEvery values.
	cancelled func() error
	// stopped is set when a bound was passed: the cluster is incomplete.
	// err is set when the caller gave up.
	stopped bool
	err     error
	keys    map[string][]string // key name -> schema paths where it is valid, for "belongs under" hints
	// encrypted holds the nodes whose values were encrypted with SOPS in
	// the file; shownEncrypted the paths of those decoded outside the
	// fields rigger never shows (secretDepth counts the open ones).
	encrypted      map[*yaml.Node]bool
	secretDepth    int
	shownEncrypted []string
	structs        map[reflect.Type]*structKeys
}

// structKeys are the keys of a struct type, worked out once per decode.
type structKeys struct {
	fields map[string]field
	names  []string // in declaration order
	known  string   // "Known keys here: …", for an unknown key that is no typo
}

// keysOf returns the keys of struct type t.
func (d *decoder) keysOf(t reflect.Type) *structKeys {
	k := d.structs[t]
	if k == nil {
		names := fieldNames(t)
		k = &structKeys{fields: fieldsOf(t), names: names, known: "Known keys here: " + strings.Join(names, ", ") + "."}
		d.structs[t] = k
	}
	return k
}

func newDecoder(file string, diags *collector, cancelled func() error) *decoder {
	return &decoder{file: file, diags: diags, cancelled: cancelled, pos: map[string]Pos{}, bad: map[string]bool{},
		zero: map[string]bool{}, open: map[*yaml.Node]int{}, structs: map[reflect.Type]*structKeys{}}
}

func (d *decoder) errorf(n *yaml.Node, path, detail, format string, args ...any) {
	d.bad[path] = true
	d.diags.add(Diagnostic{
		Severity: SeverityError, File: d.file, Line: n.Line, Column: n.Column,
		Path: path, Summary: sprintf(format, args...), Detail: detail,
	})
}

func (d *decoder) warnf(n *yaml.Node, path, detail, format string, args ...any) {
	d.diags.add(Diagnostic{
		Severity: SeverityWarning, File: d.file, Line: n.Line, Column: n.Column,
		Path: path, Summary: sprintf(format, args...), Detail: detail,
	})
}

// enter is called before n is decoded at path: it counts n and checks the
// bounds. false means n is not to be decoded, and decoding stops: a bound
// was passed (reported), or the caller gave up. Otherwise leave(n) must
// follow.
func (d *decoder) enter(n *yaml.Node, path string) bool {
	if d.stopped {
		return false
	}
	d.nodes++
	switch {
	case d.nodes > maxNodes:
		d.stop(n, "", fmt.Sprintf("It has more than %d values; reduce the use of YAML anchors and aliases.", maxNodes),
			"the document is too large once its aliases are expanded")
	case d.depth >= maxDepth:
		d.stop(n, path, "Flatten the value; if it holds an alias, make sure the alias does not lead back into it. The rest of the file is not checked.",
			"the value is nested more than %d levels deep", maxDepth)
	case len(path) > maxPath:
		d.stop(n, clip.Ellipsis(path, maxPath), "Shorten the keys of the value, or flatten it. The rest of the file is not checked.",
			"the path of the value is longer than %d characters", maxPath)
	case d.nodes%checkEvery == 0:
		if err := d.cancelled(); err != nil {
			d.stopped, d.err = true, err
		}
	}
	if d.stopped {
		return false
	}
	if d.encrypted[n] && d.secretDepth == 0 {
		d.shownEncrypted = append(d.shownEncrypted, path)
	}
	d.depth++
	if n.Anchor != "" {
		d.open[n]++
	}
	return true
}

func (d *decoder) leave(n *yaml.Node) {
	d.depth--
	if n.Anchor != "" {
		d.open[n]--
	}
}

// stop reports the bound n passed and ends the decode.
func (d *decoder) stop(n *yaml.Node, path, detail, format string, args ...any) {
	d.errorf(n, path, detail, format, args...)
	d.stopped = true
}

// follow returns the node alias n stands for, or nil, reported, when the
// alias is inside the value it names: that value would have no end.
func (d *decoder) follow(n *yaml.Node, path string) *yaml.Node {
	if d.open[n.Alias] > 0 {
		d.errorf(n, path, fmt.Sprintf("A value cannot hold an alias of itself: write the inner value out, or put the anchor &%s on a part that does not hold *%s.", clip.Ellipsis(n.Value, maxShown), clip.Ellipsis(n.Value, maxShown)),
			"the alias *%s is inside the value it names", n.Value)
		return nil
	}
	return n.Alias
}

// value decodes n into v (addressable) at path.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if !d.enter(n, path) {
		return
	}
	defer d.leave(n)
	if n.Kind == yaml.AliasNode {
		if a := d.follow(n, path); a != nil {
			d.value(a, v, path)
		}
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
	if v.Type() == objectType {
		start := d.nodes
		d.mapValue(n, v, path)
		if values := d.nodes - start; values > maxObjectValues && !d.stopped {
			d.errorf(n, path, "rigger writes it out for the nodes, and one this large costs far more memory than any takes; keep it to what the component needs",
				"the value holds %d values, more than the %d rigger takes in one", values, maxObjectValues)
			v.SetZero()
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
		return fmt.Sprintf("%q", clip.Ellipsis(n.Value, maxShown))
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
	if !d.enter(n, path) {
		return nil
	}
	defer d.leave(n)
	switch {
	case n.Kind == yaml.AliasNode:
		if a := d.follow(n, path); a != nil {
			return d.mergeSources(a, path)
		}
		return nil
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
	fields := d.keysOf(v.Type()).fields
	given := map[string]*yaml.Node{} // by field name: the key that gave it
	for _, p := range d.pairs(n, path) {
		key := p.key.Value
		f, alias, ok := lookupField(fields, key)
		if !ok {
			d.unknownKey(p.key, path, key, v.Type())
			continue
		}
		fpath := join(path, f.name)
		if first, dup := given[f.name]; dup {
			d.errorf(p.key, fpath, fmt.Sprintf("Keep %q, which RKE reads too.", f.name), "%s is given twice, as %q (line %d) and as %q", f.name, first.Value, first.Line, key)
			continue
		}
		given[f.name] = p.key
		if alias {
			d.warnf(p.key, fpath, fmt.Sprintf("RKE's parser reads %q here and drops %q without a word; rigger reads both. Write %s, which both read.", f.name, key, f.name),
				"RKE ignores %q", key)
		}
		d.pos[fpath] = Pos{p.key.Line, p.key.Column}
		secret := f.secretness == tagSecret || f.secretness == tagSecretEnv
		if secret {
			d.secretDepth++
		}
		d.value(p.value, v.FieldByIndex(f.index), fpath)
		if secret {
			d.secretDepth--
		}
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
			hint = sprintf("Write it as a list: [%s], or one `- %s` per line.", n.Value, n.Value)
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

// objectType is the type of the free-form fields.
var objectType = reflect.TypeFor[Object]()

// generic decodes a free-form value: mappings become map[string]any, lists
// []any, scalars their YAML type.
func (d *decoder) generic(n *yaml.Node, path string) any {
	if !d.enter(n, path) {
		return nil
	}
	defer d.leave(n)
	switch n.Kind {
	case yaml.AliasNode:
		if a := d.follow(n, path); a != nil {
			return d.generic(a, path)
		}
		return nil
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
	if ig, ok := ignoredKeys[schemaPath(fpath)]; ok {
		d.warnf(k, fpath, ig.detail, "%s", ig.summary)
		return
	}
	where := "at the top level"
	if path != "" {
		where = "in " + path
	}
	keys := d.keysOf(t)
	var detail string
	if elsewhere := d.keyLocations()[key]; len(elsewhere) > 0 && len(elsewhere) <= 3 {
		detail = sprintf("%q belongs under %s.", key, strings.Join(elsewhere, " or "))
	} else if s := suggest(key, keys.names); s != "" {
		detail = fmt.Sprintf("Did you mean %q?", s)
	} else {
		detail = keys.known
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
			keys := d.keysOf(t)
			for _, name := range keys.names {
				d.keys[name] = append(d.keys[name], parent)
				walk(keys.fields[name].typ, join(path, name), depth+1)
			}
		}
		walk(reflect.TypeFor[Cluster](), "", 0)
	}
	return d.keys
}

// field is one key of a struct type.
type field struct {
	name  string // the key: the json tag's name
	index []int
	typ   reflect.Type
	// secretness is the field's `rigger` tag (see redact.go).
	secretness string
	// alias is another spelling of the key that rigger reads and RKE's
	// parser drops (tag `alias`): the Kubernetes camel case of a key RKE
	// reads in lower case, such as tolerationSeconds. A warning says so.
	alias string
	// fold is set where RKE reads the key in any case (tag `match:"fold"`):
	// RKE decodes the mapping again with encoding/json, which matches keys
	// so (an update_strategy's rollingUpdate).
	fold bool
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
		out[name] = field{name: name, index: sf.Index, typ: sf.Type, secretness: secrecy(sf),
			alias: sf.Tag.Get("alias"), fold: sf.Tag.Get("match") == "fold"}
	}
	return out
}

// lookupField finds the field that key names among fields: by its name,
// by its alias (alias is then set), or in any case where RKE reads it so.
func lookupField(fields map[string]field, key string) (f field, alias, ok bool) {
	if f, ok := fields[key]; ok {
		return f, false, true
	}
	for _, f := range fields {
		switch {
		case f.alias != "" && f.alias == key:
			return f, true, true
		case f.fold && strings.EqualFold(f.name, key):
			return f, false, true
		}
	}
	return field{}, false, false
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

// join is the path of key under path: `services.kube-api`. A key longer
// than maxKey is shown by its beginning: `services["kube-apiiiii…"]`.
func join(path, key string) string {
	switch {
	case len(key) > maxKey:
		return fmt.Sprintf("%s[%q]", path, clip.Ellipsis(key, maxKey))
	case path == "":
		return key
	}
	return path + "." + key
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// mapKeyPath is the path of a map entry: `labels.zone`, or
// `labels["app.kubernetes.io/name"]` when the key is not a plain word.
func mapKeyPath(path, key string) string {
	if len(key) <= maxKey && !plainKey.MatchString(key) {
		return fmt.Sprintf("%s[%q]", path, key)
	}
	return join(path, key)
}

// maxSuggest bounds the keys and values given a "did you mean": a longer
// one is no typo, and comparing it would cost its length squared.
const maxSuggest = 64

// suggest returns the known key closest to key, or "" when none is close.
// Case, '-' and '_' do not count.
func suggest(key string, known []string) string {
	if len(key) > maxSuggest {
		return ""
	}
	for _, k := range known {
		if sameWord(k, key) {
			return k
		}
	}
	limit := max(1, min(3, len(key)/3))
	best, bestDist := "", limit+1
	for _, k := range known {
		if dist := editDistance(key, k, limit); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
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

// sameWord reports whether a and b are the same word but for ASCII case,
// '-' and '_': kube-api is kubeAPI.
func sameWord(a, b string) bool {
	i, j := 0, 0
	for {
		for i < len(a) && (a[i] == '-' || a[i] == '_') {
			i++
		}
		for j < len(b) && (b[j] == '-' || b[j] == '_') {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if lower(a[i]) != lower(b[j]) {
			return false
		}
		i, j = i+1, j+1
	}
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// editDistance is the optimal string alignment distance of a and b, ASCII
// case aside: insertions, deletions, substitutions and swaps of
// neighbours ("imgae") cost one each. A distance above limit is returned
// as limit+1: only cells within limit of the diagonal are computed, three
// rows of them at a time.
func editDistance(a, b string, limit int) int {
	far := limit + 1
	if len(a)-len(b) > limit || len(b)-len(a) > limit {
		return far
	}
	// rows i-2, i-1 and i of the table, over b; on the stack for the
	// words suggest compares. A cell outside the band is far.
	n := len(b) + 1
	var buf [3 * (maxSuggest + 4)]int
	rows := buf[:]
	if 3*n > len(buf) {
		rows = make([]int, 3*n)
	}
	before, prev, cur := rows[:n], rows[n:2*n], rows[2*n:3*n]
	for j := range prev {
		prev[j] = min(j, far)
	}
	for i := 1; i <= len(a); i++ {
		lo, hi := max(1, i-limit), min(len(b), i+limit)
		cur[0] = min(i, far)
		if lo > 1 {
			cur[lo-1] = far
		}
		if hi < len(b) {
			cur[hi+1] = far
		}
		for j := lo; j <= hi; j++ {
			cost := 1
			if lower(a[i-1]) == lower(b[j-1]) {
				cost = 0
			}
			d := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && lower(a[i-1]) == lower(b[j-2]) && lower(a[i-2]) == lower(b[j-1]) {
				d = min(d, before[j-2]+1)
			}
			cur[j] = min(d, far)
		}
		before, prev, cur = prev, cur, before
	}
	return prev[len(b)]
}
