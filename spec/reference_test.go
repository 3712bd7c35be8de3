package spec

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestReferenceUpToDate regenerates docs/cluster-yml.md from the schema's
// doc comments and the defaults, and fails when the committed file differs
// (go test ./spec -update rewrites it).
func TestReferenceUpToDate(t *testing.T) {
	docs := fieldDocs(t, "types.go", "cloud.go", "aci.go")
	c, diags := Parse([]byte("nodes: [{address: 10.0.0.1, user: rke, role: [etcd, controlplane, worker]}]\n"), "min.yml")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	r := &reference{docs: docs, seen: map[reflect.Type]string{}}
	r.b.WriteString(referenceIntro)
	r.section("", reflect.ValueOf(c).Elem(), docs["Cluster"][""])
	checkGolden(t, "../docs/cluster-yml.md", r.b.String())
}

const referenceIntro = `# cluster.yml reference

rigger reads RKE's cluster.yml as RKE v1.8.14 reads it: every key RKE reads,
spelt as RKE's parser reads it, with RKE's defaults. RKE's parser reads the
keys of the Kubernetes types it uses in lower case (` + "`tolerationseconds`" + `,
` + "`cacertificates`" + `); where rigger also reads the camel case, it warns that RKE
drops that spelling. A file written by ` + "`rke config`" + ` loads as it is: its
` + "`addon_job_timeout: 0`" + ` and its ` + "`bastion_host`" + ` without an address mean "unset", as in
RKE. Keys older RKE releases wrote and RKE v1.8.14 no longer reads
(` + "`services.kube-api.pod_security_policy`" + `), and a taint's ` + "`timeAdded`" + ` and
` + "`authorization.options`" + `, which RKE reads and never uses, are ignored with a warning. rigger's own additions are
marked **(rigger)**; RKE ignores them, so one file can serve both while you
move.

Decoding is strict: an unknown or misspelled key, a value of the wrong type or
a key given twice is an error that names the file, line, column and path, with
the closest known key (` + "`rigger validate -f cluster.yml`" + `). ` + "`rigger config defaults`" + `
prints a file with every default filled in. Which Kubernetes versions rigger
knows, and how their images and flags are chosen: [versions.md](versions.md).

Limits: rigger reads at most 8 MiB and about 262,144 values (each ` + "`:`" + `, ` + "`,`" + `,
` + "`- `" + `, ` + "`[`" + ` and ` + "`{`" + ` counts, in text blocks such as ` + "`addons`" + ` too: long manifests
belong in ` + "`addons_include`" + ` files), 262,144 values once YAML aliases are expanded,
64 levels of nesting, and paths of 1024 characters; an alias inside the value it
names is an error. A file past one of these gets one error at the line where it
passes it. A file gets its first 100 problems in file order, then a count of the
others; "did you mean" is given for keys and values of up to 64 characters.
Validating a file takes about 100 MB for the program and its add-on templates,
plus up to about 20 times the file's size (the YAML libraries copy a long text a
few times over): under 300 MB at the 8 MiB limit.

A cluster.yml may be encrypted with SOPS, as ` + "`sops -e`" + ` writes it: every command decrypts
it, its diagnostics name the lines of the encrypted file, and the values of the
secret fields are never shown ([gitops.md](gitops.md#secrets-in-git-with-sops)).

Types: *string*, *bool* (true/false; yes/no/on/off are read too), *int*,
*duration* (` + "`10s`, `1m30s`" + `), *list*, *map* (key: value), *object*
(a Kubernetes object given inline, passed on unchanged). A *budget* is a number
of nodes or a percentage (` + "`2`, `10%`" + `). "—" means no default.

This file is generated from spec/*.go by ` + "`go test ./spec -update`" + `; edit the
doc comments there.
`

type reference struct {
	b    strings.Builder
	docs map[string]map[string]string // struct type -> Go field (or "" for the type) -> doc
	seen map[reflect.Type]string      // struct types already documented, and where
}

func (r *reference) section(path string, v reflect.Value, doc string) {
	t := v.Type()
	title := path
	if title == "" {
		title = "Top level"
	} else {
		title = "`" + title + "`"
	}
	fmt.Fprintf(&r.b, "\n## %s\n\n", title)
	if where, ok := r.seen[t]; ok {
		fmt.Fprintf(&r.b, "%s\n\nThe same keys as [`%s`](#%s).\n", doc, where, anchor(where))
		return
	}
	r.seen[t] = path
	if doc != "" {
		fmt.Fprintf(&r.b, "%s\n\n", doc)
	}
	r.b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
	type sub struct {
		path string
		v    reflect.Value
		doc  string
	}
	var subs []sub
	for _, sf := range reflect.VisibleFields(t) {
		if !sf.IsExported() || sf.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		fdoc := r.docFor(t, sf)
		p := join(path, name)
		if underRiggerOnly(p) {
			fdoc = "**(rigger)** " + fdoc
		}
		if alias := sf.Tag.Get("alias"); alias != "" {
			fdoc += fmt.Sprintf(" RKE reads the key in lower case only; rigger also reads `%s`, with a warning that RKE drops that spelling.", alias)
		}
		if sf.Tag.Get("match") == "fold" {
			fdoc += " The key is read in any case, as RKE reads it."
		}
		fv := v.FieldByIndex(sf.Index)
		def := "—"
		if !strings.Contains(fdoc, "Default:") && !slices.Contains([]string{"nodes", "nodes[].address", "nodes[].user", "nodes[].role"}, p) {
			def = defaultText(fv)
		}
		fmt.Fprintf(&r.b, "| `%s` | %s | %s | %s |\n", name, typeName(sf.Type), def, fdoc)
		// Nested structs get their own section, lists of structs too.
		et := sf.Type
		ev := fv
		suffix := ""
		for et.Kind() == reflect.Pointer || et.Kind() == reflect.Slice || et.Kind() == reflect.Map {
			switch et.Kind() {
			case reflect.Slice:
				suffix += "[]"
			case reflect.Map:
				suffix += ".*"
			}
			if et.Kind() == reflect.Pointer && !ev.IsNil() {
				ev = ev.Elem()
			} else if et.Kind() == reflect.Slice && ev.Len() > 0 {
				ev = ev.Index(0)
			} else {
				ev = reflect.New(et.Elem()).Elem()
			}
			et = et.Elem()
		}
		if et.Kind() == reflect.Struct && et != reflect.TypeFor[Duration]() {
			subs = append(subs, sub{p + suffix, ev, fdoc})
		}
	}
	for _, s := range subs {
		r.section(s.path, s.v, s.doc)
	}
}

func (r *reference) docFor(t reflect.Type, sf reflect.StructField) string {
	// A promoted field is documented on the embedded type.
	for _, st := range []reflect.Type{t, reflect.TypeFor[BaseService]()} {
		if d, ok := r.docs[st.Name()][sf.Name]; ok {
			return d
		}
	}
	return ""
}

func anchor(path string) string {
	return strings.NewReplacer(".", "", "[", "", "]", "", "*", "", "`", "").Replace(strings.ToLower(path))
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[Duration]():
		return "duration"
	case t == reflect.TypeFor[Object]():
		return "object"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Slice:
		return "list of " + typeName(t.Elem())
	case reflect.Map:
		return "map of " + typeName(t.Elem())
	case reflect.Struct:
		return "mapping"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "int"
	case reflect.Float64:
		return "number"
	}
	return t.Kind().String()
}

func defaultText(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "—"
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct && v.Type() != reflect.TypeFor[Duration]() {
		return "—"
	}
	if v.IsZero() && v.Kind() != reflect.Bool {
		return "—"
	}
	n := encodeValue(v, false)
	if n == nil {
		return "`false`"
	}
	if v.Kind() == reflect.Map {
		var parts []string
		for i := 0; i+1 < len(n.Content); i += 2 {
			parts = append(parts, n.Content[i].Value+": "+n.Content[i+1].Value)
		}
		return "`" + strings.Join(parts, ", ") + "`"
	}
	return "`" + n.Value + "`"
}

// fieldDocs reads the doc comments of the struct types in files.
func fieldDocs(t *testing.T, files ...string) map[string]map[string]string {
	out := map[string]map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				m := map[string]string{"": strings.TrimSpace(gd.Doc.Text())}
				for _, fld := range st.Fields.List {
					for _, name := range fld.Names {
						m[name.Name] = strings.Join(strings.Fields(fld.Doc.Text()), " ")
					}
				}
				out[ts.Name.Name] = m
			}
		}
	}
	return out
}
