package addons

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decoded is what a test compares of a decoded object.
type decoded struct {
	Ref    string
	Source string
}

func summaries(objs []Object) []decoded {
	var out []decoded
	for _, o := range objs {
		out = append(out, decoded{Ref: o.GetAPIVersion() + " " + refOf(o.Unstructured).String(), Source: o.Source.String()})
	}
	return out
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []decoded
	}{
		{
			name: "one object",
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
			want: []decoded{{"v1 ConfigMap a", "m.yaml: document 1 at line 1"}},
		},
		{
			name: "documents, empty ones and comments skipped, lines counted",
			in: `# leading comment
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: x
---
# only a comment
---

---   # separator with a comment
null
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: b}
`,
			want: []decoded{
				{"v1 ConfigMap x/a", "m.yaml: document 1 at line 3"},
				{"apps/v1 Deployment b", "m.yaml: document 3 at line 15"},
			},
		},
		{
			name: "a List gives its items",
			in: `apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: ServiceAccount, metadata: {name: sa, namespace: kube-system}}
- {apiVersion: v1, kind: Secret, metadata: {name: s}}
`,
			want: []decoded{
				{"v1 ServiceAccount kube-system/sa", "m.yaml: document 1 at line 1, item 1"},
				{"v1 Secret s", "m.yaml: document 1 at line 1, item 2"},
			},
		},
		{
			name: "a kind ending in List without items is an object",
			in:   "apiVersion: example.com/v1\nkind: AllowList\nmetadata: {name: a}\nspec: {}\n",
			want: []decoded{{"example.com/v1 AllowList a", "m.yaml: document 1 at line 1"}},
		},
		{
			name: "CRLF line ends",
			in:   "---\r\napiVersion: v1\r\nkind: ConfigMap\r\nmetadata: {name: a}\r\n---\r\n",
			want: []decoded{{"v1 ConfigMap a", "m.yaml: document 1 at line 2"}},
		},
		{
			name: "nothing",
			in:   "# nothing here\n---\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := Decode("m.yaml", []byte(tt.in), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, summaries(objs)); diff != "" {
				t.Errorf("objects differ (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		limits Limits
		want   string
	}{
		{
			name: "YAML syntax, line of the manifest",
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n   bad: indent\n",
			want: "m.yaml: document 2 at line 5: yaml: line 9: mapping values are not allowed in this context",
		},
		{
			name: "duplicate key",
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: '1', x: '2'}\n",
			want: `m.yaml: document 1 at line 1: yaml: unmarshal errors: line 4: key "x" already set in map`,
		},
		{
			name: "no kind",
			in:   "apiVersion: v1\nmetadata: {name: a}\n",
			want: "m.yaml: document 1 at line 1: kind is missing: every object needs apiVersion, kind and metadata.name",
		},
		{
			name: "no name",
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
			want: "m.yaml: document 1 at line 1: metadata.name is missing: every object needs apiVersion, kind and metadata.name",
		},
		{
			name: "generateName",
			in:   "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: j-}\n",
			want: "m.yaml: document 1 at line 1: metadata.name is missing: rigger applies objects by name: generateName is not supported",
		},
		{
			name: "name not a string",
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 12}\n",
			want: "m.yaml: document 1 at line 1: metadata.name must be a string",
		},
		{
			name: "a list document",
			in:   "- a\n- b\n",
			want: "m.yaml: document 1 at line 1: a document must be a Kubernetes object (a mapping), not a list",
		},
		{
			name: "a List item that is not an object",
			in:   "apiVersion: v1\nkind: List\nitems: [3]\n",
			want: "m.yaml: document 1 at line 1, item 1: a List item must be a Kubernetes object (a mapping), not a number",
		},
		{
			name: "content after a separator",
			in:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n--- {a: 1}\n",
			want: "m.yaml: line 4: only a comment may follow a document separator (---)",
		},
		{
			name:   "too large",
			in:     strings.Repeat("#", 101),
			limits: Limits{MaxBytes: 100},
			want:   "m.yaml: 101 bytes, more than the limit of 100",
		},
		{
			name:   "too many objects",
			in:     "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n",
			limits: Limits{MaxObjects: 1},
			want:   "m.yaml: document 1 at line 1, item 2: more than 1 objects",
		},
		{
			name:   "too many documents",
			in:     "a: 1\n---\nb: 2\n",
			limits: Limits{MaxObjects: 1},
			want:   "m.yaml: document 1 at line 1: apiVersion is missing: every object needs apiVersion, kind and metadata.name",
		},
		{
			name:   "too many empty Lists",
			in:     "{apiVersion: v1, kind: List, items: []}\n---\n{apiVersion: v1, kind: List, items: []}\n",
			limits: Limits{MaxObjects: 1},
			want:   "m.yaml: document 2 at line 3: more than 1 documents",
		},
		{
			name: "Lists nested too deep",
			in:   "{apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: List, items: []}]}]}]}\n",
			want: "m.yaml: document 1 at line 1, item 1: Lists nested more than 3 deep",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode("m.yaml", []byte(tt.in), tt.limits)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a *DecodeError", err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// FuzzDecodeManifest feeds Decode arbitrary manifests: it must not panic,
// must stay within its limits, and every object it returns must be one
// the engine can apply (apiVersion, kind, name).
func FuzzDecodeManifest(f *testing.F) {
	for _, s := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: s}}\n",
		"# c\n---\nnull\n--- # x\n{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, namespace: n}, spec: {replicas: 1}}\n",
		"a: &a [1, *a]\n",
		"- 1\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n   bad: indent\n",
	} {
		f.Add([]byte(s))
	}
	lim := Limits{MaxBytes: 1 << 16, MaxObjects: 64}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 {
			t.Skip()
		}
		objs, err := Decode("fuzz.yaml", data, lim)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DecodeError", err)
			}
			return
		}
		if len(objs) > lim.MaxObjects {
			t.Fatalf("%d objects, more than the limit %d", len(objs), lim.MaxObjects)
		}
		for _, o := range objs {
			if o.GetAPIVersion() == "" || o.GetKind() == "" || o.GetName() == "" {
				t.Fatalf("object without apiVersion, kind or name: %v", o.Object)
			}
			if o.Source.Document < 1 || o.Source.Line < 1 {
				t.Fatalf("object without its document and line: %+v", o.Source)
			}
			if _, err := o.MarshalJSON(); err != nil {
				t.Fatalf("object cannot be encoded for the API server: %v", err)
			}
		}
	})
}
