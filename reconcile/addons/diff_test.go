package addons

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// obj decodes YAML as the API server's JSON decodes (whole numbers int64).
func obj(t *testing.T, y string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := utiljson.Unmarshal(j, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNormalize(t *testing.T) {
	live := obj(t, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  uid: 1234
  resourceVersion: "42"
  generation: 3
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields: [{manager: rigger}]
  labels: {app: web}
spec: {replicas: 2}
status: {readyReplicas: 1}
`)
	want := obj(t, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
  labels: {app: web}
spec: {replicas: 2}
`)
	if diff := cmp.Diff(want, normalize(live)); diff != "" {
		t.Errorf("normalize (-want +got):\n%s", diff)
	}
	if _, ok := live["status"]; !ok {
		t.Error("normalize changed its argument")
	}
}

func TestDiffAndSummary(t *testing.T) {
	tests := []struct {
		name        string
		before      string
		after       string
		secret      bool
		wantPaths   []string
		wantSummary string
	}{
		{
			name:   "same",
			before: "spec: {replicas: 1}",
			after:  "spec: {replicas: 1}",
		},
		{
			name:        "scalar changed",
			before:      "spec: {replicas: 1}",
			after:       "spec: {replicas: 3}",
			wantPaths:   []string{"spec.replicas"},
			wantSummary: "spec.replicas: 1 → 3",
		},
		{
			name:        "containers matched by name",
			before:      "spec: {containers: [{name: a, image: 'x:1'}, {name: b, image: 'y:1'}]}",
			after:       "spec: {containers: [{name: a, image: 'x:2'}, {name: b, image: 'y:1'}, {name: c, image: z}]}",
			wantPaths:   []string{"spec.containers[name=a].image", "spec.containers[name=c]"},
			wantSummary: "spec.containers[name=a].image: x:1 → x:2; spec.containers[name=c] added",
		},
		{
			name:        "label keys with dots, added and removed",
			before:      "metadata: {labels: {app.kubernetes.io/name: x, old: y}}",
			after:       "metadata: {labels: {app.kubernetes.io/name: x, rigger.io/addon: demo}}",
			wantPaths:   []string{"metadata.labels.old", `metadata.labels["rigger.io/addon"]`},
			wantSummary: `metadata.labels.old removed; metadata.labels["rigger.io/addon"]: + demo`,
		},
		{
			name:        "list of scalars of another length",
			before:      "spec: {args: [a, b]}",
			after:       "spec: {args: [a, b, c]}",
			wantPaths:   []string{"spec.args"},
			wantSummary: "spec.args changed",
		},
		{
			name:        "ports by index",
			before:      "spec: {ports: [{port: 80}, {port: 443}]}",
			after:       "spec: {ports: [{port: 8080}, {port: 443}]}",
			wantPaths:   []string{"spec.ports[0].port"},
			wantSummary: "spec.ports[0].port: 80 → 8080",
		},
		{
			name:        "a Secret's values are never shown",
			before:      "data: {password: b2xk}",
			after:       "data: {password: bmV3}",
			secret:      true,
			wantPaths:   []string{"data.password"},
			wantSummary: "data.password changed",
		},
		{
			name:        "a secret-looking env var is not shown",
			before:      "env: [{name: API_TOKEN, value: old}, {name: MODE, value: a}]",
			after:       "env: [{name: API_TOKEN, value: new}, {name: MODE, value: b}]",
			wantPaths:   []string{"env[name=API_TOKEN].value", "env[name=MODE].value"},
			wantSummary: "env[name=API_TOKEN].value changed; env[name=MODE].value: a → b",
		},
		{
			name:        "a URL's credentials are not shown",
			before:      "env: [{name: HTTPS_PROXY, value: 'http://u:0ld@p:1'}, {name: NO_PROXY, value: 'http://p:1'}]",
			after:       "env: [{name: HTTPS_PROXY, value: 'http://u:n3w@p:1'}, {name: NO_PROXY, value: 'http://t0k@p:1'}]",
			wantPaths:   []string{"env[name=HTTPS_PROXY].value", "env[name=NO_PROXY].value"},
			wantSummary: "env[name=HTTPS_PROXY].value changed; env[name=NO_PROXY].value: http://p:1 → http://(redacted)@p:1",
		},
		{
			name:        "a secret-looking path is not shown",
			before:      "data: {db_passwd: a, credentials: b}",
			after:       "data: {db_passwd: c, credentials: d}",
			wantPaths:   []string{"data.credentials", "data.db_passwd"},
			wantSummary: "data.credentials changed; data.db_passwd changed",
		},
		{
			name:        "long and multi-line values are not shown",
			before:      "data: {config: \"a\\nb\", long: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}",
			after:       "data: {config: \"a\\nc\", long: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb}",
			wantPaths:   []string{"data.config", "data.long"},
			wantSummary: "data.config changed; data.long changed",
		},
		{
			name:        "at most three spelled out",
			before:      "data: {a: '1', b: '1', c: '1', d: '1', e: '1'}",
			after:       "data: {a: '2', b: '2', c: '2', d: '2', e: '2'}",
			wantPaths:   []string{"data.a", "data.b", "data.c", "data.d", "data.e"},
			wantSummary: "data.a: 1 → 2; data.b: 1 → 2; data.c: 1 → 2; and 2 more",
		},
		{
			name:        "strings with blanks are quoted",
			before:      "data: {a: 'x y', b: ''}",
			after:       "data: {a: 'x z', b: 'v'}",
			wantPaths:   []string{"data.a", "data.b"},
			wantSummary: `data.a: "x y" → "x z"; data.b: "" → v`,
		},
		{
			name:        "same names reordered",
			before:      "spec: {containers: [{name: a}, {name: b}]}",
			after:       "spec: {containers: [{name: b}, {name: a}]}",
			wantPaths:   []string{"spec.containers"},
			wantSummary: "spec.containers reordered",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diffs := diffObjects(obj(t, tt.before), obj(t, tt.after))
			var paths []string
			for _, d := range diffs {
				paths = append(paths, d.Path)
			}
			if diff := cmp.Diff(tt.wantPaths, paths); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
			if got := summarize(diffs, tt.secret); got != tt.wantSummary {
				t.Errorf("summary:\n got %s\nwant %s", got, tt.wantSummary)
			}
		})
	}
}
