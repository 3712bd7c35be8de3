package spec

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// nodesYML is a valid nodes: block for the hostile documents below.
const nodesYML = "nodes: [{address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}]\n"

// allocated returns the bytes f allocates. The bound the tests give is
// far above what f needs and far below what an unbounded f took.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// billionLaughs is a list that grows ninefold with every level of aliases.
func billionLaughs(indent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sl0: &l0 [x, x, x, x, x, x, x, x, x]\n", indent)
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "%sl%d: &l%d [*l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d, *l%d]\n", indent, i, i,
			i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	return b.String()
}

// TestHostileDocumentsAreBounded: documents made to blow up the decoder
// (aliases that contain themselves, aliases nine times nine times over,
// nesting without end, a structure too dense to hold) end with one error
// naming the field and line, in bounded memory.
func TestHostileDocumentsAreBounded(t *testing.T) {
	const limit = 256 << 20
	tests := []struct {
		name    string
		yml     string
		line    int
		path    string // the diagnostic's path starts with it
		summary string
	}{
		{
			// The 178-byte file of issue 15: 7.8 GB before.
			name:    "a mapping that holds its own alias",
			yml:     nodesYML + "services:\n  kube-api:\n    admission_configuration: &a {apiVersion: v1, kind: X, x: *a}\n",
			line:    4,
			path:    "services.kube-api.admission_configuration.x",
			summary: "the alias *a is inside the value it names",
		},
		{
			name:    "a list that holds its own alias",
			yml:     nodesYML + "services:\n  kube-api:\n    admission_configuration: {apiVersion: v1, kind: X, plugins: &l [a, *l, [*l]]}\n",
			line:    4,
			path:    "services.kube-api.admission_configuration.plugins[1]",
			summary: "the alias *l is inside the value it names",
		},
		{
			name:    "a mapping that merges itself",
			yml:     nodesYML + "services:\n  kube-api:\n    extra_args: &e {a: b, <<: *e}\n",
			line:    4,
			path:    "services.kube-api.extra_args",
			summary: "the alias *e is inside the value it names",
		},
		{
			name:    "nested lists without end, no alias",
			yml:     nodesYML + "services:\n  kube-api:\n    admission_configuration: {apiVersion: v1, kind: X, l: " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + "}\n",
			line:    4,
			path:    "services.kube-api.admission_configuration.l[0][0][0]",
			summary: "nested more than 64 levels deep",
		},
		{
			name:    "a billion laughs in an object",
			yml:     nodesYML + "services:\n  kube-api:\n    admission_configuration:\n      apiVersion: v1\n      kind: X\n" + billionLaughs("      "),
			summary: "the document is too large once its aliases are expanded",
		},
		{
			name:    "a billion laughs merged into extra_args",
			yml:     nodesYML + "x-args: &a0 {a: b, c: d, e: f, g: h, i: j, k: l, m: n, o: p, q: r}\n" + mergeLaughs("a", 9) + "services:\n  kube-api:\n    extra_args: *a9\n",
			summary: "the document is too large once its aliases are expanded",
		},
		{
			name:    "a billion laughs merged into nodes",
			yml:     "x-n: &n0 {address: 10.0.0.1, user: u, role: [etcd, controlplane, worker]}\n" + mergeLaughs("n", 9) + "nodes: [*n9]\n",
			summary: "the document is too large once its aliases are expanded",
		},
		{
			// Each role is reported with the value: 1,000 diagnostics of
			// a megabyte each, and as many "did you mean" of a megabyte.
			name:    "a long string aliased into many fields",
			yml:     "x-big: &big " + strings.Repeat("x", 1<<20) + "\nnodes:\n" + strings.Repeat("  - {address: 10.0.0.1, user: u, role: ["+strings.Repeat("*big, ", 49)+"*big]}\n", 20),
			line:    3,
			path:    "nodes[0].role[0]",
			summary: "for host (1) is not recognized",
		},
		{
			// An unknown key of 64 KiB, given again by alias in 1,000 nodes.
			// (A key of more than 1024 characters must be written `? key`.)
			name: "a long key aliased as a key many times",
			yml: "nodes:\n  - address: 10.0.0.1\n    user: u\n    role: [etcd, controlplane, worker]\n    ? &k " + strings.Repeat("k", 1<<16) + "\n    : 1\n" +
				strings.Repeat("  - {address: 10.0.0.2, user: u, role: [worker], *k : 1}\n", 1000),
			line:    5,
			path:    `nodes[0]["kkkk`,
			summary: `unknown key "kkkk`,
		},
		{
			name:    "a list too dense to hold",
			yml:     nodesYML + "services:\n  kube-api:\n    admission_configuration: {apiVersion: v1, kind: X, l: [" + strings.Repeat("a,", 1<<20) + "a]}\n",
			line:    4,
			summary: "the file holds more YAML values than rigger reads",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var diags Diagnostics
			if n := allocated(func() { _, diags = Parse([]byte(tt.yml), "cluster.yml") }); n > limit {
				t.Errorf("Parse allocated %d MiB, want at most %d MiB", n>>20, limit>>20)
			}
			var found *Diagnostic
			for i, d := range diags {
				if strings.Contains(d.Summary, tt.summary) {
					found = &diags[i]
					break
				}
			}
			if found == nil {
				t.Fatalf("no diagnostic says %q:\n%v", tt.summary, diags)
			}
			if found.Severity != SeverityError || (tt.line != 0 && found.Line != tt.line) || !strings.HasPrefix(found.Path, tt.path) {
				t.Errorf("got %s\nwant an error at line %d, path %s…", found, tt.line, tt.path)
			}
			if len(found.Path) > maxPath+64 || len(found.Summary) > maxText+3 || len(found.Detail) > maxText+3 {
				t.Errorf("the diagnostic is too long: path %d, summary %d, detail %d bytes", len(found.Path), len(found.Summary), len(found.Detail))
			}
			if len(diags) > maxDiagnostics+2 {
				t.Errorf("%d diagnostics, want at most %d", len(diags), maxDiagnostics+2)
			}
		})
	}
}

// mergeLaughs is a mapping that merges the one before it nine times, n
// levels deep.
func mergeLaughs(name string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		p := fmt.Sprintf("*%s%d", name, i-1)
		fmt.Fprintf(&b, "x-%s%d: &%s%d {<<: [%s, %s, %s, %s, %s, %s, %s, %s, %s]}\n", name, i, name, i, p, p, p, p, p, p, p, p, p)
	}
	return b.String()
}

// TestDiagnosticsAreCapped: a file with thousands of mistakes gets the
// first maxDiagnostics in file order and one more that counts the rest.
func TestDiagnosticsAreCapped(t *testing.T) {
	var y strings.Builder
	y.WriteString("nodes:\n")
	for i := range 1000 {
		role := "worker"
		if i == 0 {
			role = "etcd, controlplane, worker"
		}
		fmt.Fprintf(&y, "  - {address: 10.0.%d.%d, user: u, role: [%s], port: [x]}\n", i/250, i%250+1, role)
	}
	_, diags := Parse([]byte(y.String()), "cluster.yml")
	if len(diags) != maxDiagnostics+1 {
		t.Fatalf("%d diagnostics, want %d", len(diags), maxDiagnostics+1)
	}
	for i, d := range diags[:maxDiagnostics] {
		if d.Line != i+2 || d.Path != fmt.Sprintf("nodes[%d].port", i) {
			t.Errorf("diagnostic %d is %s, want nodes[%d].port at line %d", i, d, i, i+2)
		}
	}
	last := diags[maxDiagnostics]
	if last.Severity != SeverityError || last.Summary != "and 900 more errors" || !strings.Contains(last.Detail, "first 100") {
		t.Errorf("last diagnostic is %+v, want one that counts the 900 others", last)
	}
	if err := diags.Err(); err == nil || !strings.HasPrefix(err.Error(), "1000 errors:\n") || !strings.HasSuffix(err.Error(), "and 900 more errors\n    Only the first 100 problems are shown: fix them and check the file again.") {
		t.Errorf("error %v", err)
	}
	if errs, warns := diags.Count(); errs != 1000 || warns != 0 {
		t.Errorf("Count() = %d errors, %d warnings; want 1000, 0", errs, warns)
	}
}

// TestDiagnosticsCapKeepsFileOrder: the diagnostics kept are the first in
// file order even when validation finds them in another order (a map).
func TestDiagnosticsCapKeepsFileOrder(t *testing.T) {
	var y strings.Builder
	y.WriteString(nodesYML + "services:\n  kube-api:\n    extra_args:\n")
	for i := range 300 {
		fmt.Fprintf(&y, "      --flag-%03d: x\n", i)
	}
	_, diags := Parse([]byte(y.String()), "cluster.yml")
	if len(diags) != maxDiagnostics+1 {
		t.Fatalf("%d diagnostics, want %d", len(diags), maxDiagnostics+1)
	}
	for i, d := range diags[:maxDiagnostics] {
		if d.Line != i+5 || d.Severity != SeverityWarning {
			t.Errorf("diagnostic %d is %s, want a warning at line %d", i, d, i+5)
		}
	}
	if last := diags[maxDiagnostics]; last.Severity != SeverityWarning || last.Summary != "and 200 more warnings" {
		t.Errorf("last diagnostic is %+v, want a warning that counts the 200 others", last)
	}
}

// TestLongValuesAreShortened: a key or value of a megabyte is named by
// its beginning, gets no "did you mean", and costs no quadratic memory
// (575 MB for "did you mean" before).
func TestLongValuesAreShortened(t *testing.T) {
	long := strings.Repeat("extra_args", 100<<10)
	for _, tt := range []struct{ name, yml, path string }{
		{"unknown key", nodesYML + "services:\n  kube-api:\n    ? " + long + "\n    : 1\n", `services.kube-api["extra_args`},
		{"unknown value", nodesYML + "network: {plugin: " + long + "}\n", "network.plugin"},
		{"map key", nodesYML + "services:\n  kube-api:\n    extra_args: {? -" + long + " : x}\n", `services.kube-api.extra_args["-extra_args`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var diags Diagnostics
			if n := allocated(func() { _, diags = Parse([]byte(tt.yml), "cluster.yml") }); n > 64<<20 {
				t.Errorf("Parse allocated %d MiB, want at most 64 MiB", n>>20)
			}
			if len(diags) == 0 {
				t.Fatal("no diagnostic")
			}
			d := diags[0]
			if !strings.HasPrefix(d.Path, tt.path) || len(d.Path) > maxKey+64 || len(d.Summary) > 2*maxShown || len(d.Detail) > maxText+3 {
				t.Errorf("diagnostic of %d bytes (path %.80q): want it shortened, at path %s", len(d.String()), d.Path, tt.path)
			}
			if strings.Contains(d.Detail, "Did you mean") {
				t.Errorf("a suggestion for a key of %d bytes: %s", len(long), d.Detail)
			}
		})
	}
}

// TestDiagnosticsAreLinear: the work of decoding and validating grows
// with the file, not with the square of its mistakes (8,000 nodes with a
// bad field took 29 s before). Counted in allocations, which do not
// depend on the machine's speed.
func TestDiagnosticsAreLinear(t *testing.T) {
	doc := func(n int) []byte {
		var y strings.Builder
		y.WriteString("nodes:\n")
		for i := range n {
			role := "worker"
			if i == 0 {
				role = "etcd, controlplane, worker"
			}
			// A bad value at a long path, and an unknown key.
			fmt.Fprintf(&y, "  - {address: 10.0.%d.%d, user: u, role: [%s], labels: {example.com/a-rather-long-label-key: [x]}, labelz: {}}\n",
				i/250, i%250+1, role)
		}
		return []byte(y.String())
	}
	small, large := doc(500), doc(2000)
	a := testing.AllocsPerRun(1, func() { Parse(small, "cluster.yml") })
	b := testing.AllocsPerRun(1, func() { Parse(large, "cluster.yml") })
	if b > 6*a {
		t.Errorf("500 nodes: %.0f allocations, 2,000 nodes: %.0f; want at most 6 times as many", a, b)
	}
}

func TestSuggestBounded(t *testing.T) {
	known := []string{"extra_args", "extra_binds"}
	if got := suggest(strings.Repeat("extra_args", 10), known); got != "" {
		t.Errorf("suggest for a key of 100 bytes = %q, want none", got)
	}
	if got := editDistance("imgae", "image", 3); got != 1 {
		t.Errorf("editDistance(imgae, image) = %d, want 1", got)
	}
	if got := editDistance("kitten", "sitting", 3); got != 3 {
		t.Errorf("editDistance(kitten, sitting) = %d, want 3", got)
	}
	if got := editDistance("kitten", "sitting", 2); got != 3 {
		t.Errorf("editDistance(kitten, sitting) with limit 2 = %d, want 3 (over the limit)", got)
	}
	if got := editDistance("abcdef", "badcfe", 3); got != 3 {
		t.Errorf("editDistance(abcdef, badcfe) = %d, want 3 swaps", got)
	}
	// The band gives what the whole table gives, up to the limit.
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = "abcAB-"[r.IntN(6)]
		}
		return string(b)
	}
	for range 20000 {
		a, b, limit := word(), word(), 1+r.IntN(3)
		if got, want := editDistance(a, b, limit), min(fullDistance(strings.ToLower(a), strings.ToLower(b)), limit+1); got != want {
			t.Fatalf("editDistance(%q, %q, %d) = %d, want %d", a, b, limit, got, want)
		}
	}
}

// fullDistance is the optimal string alignment distance over the whole table.
func fullDistance(a, b string) int {
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

// TestParseContext: a cancelled context stops decoding and validation;
// the error says so and no cluster is returned.
func TestParseContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var y strings.Builder
	y.WriteString("nodes:\n")
	for i := range 5000 {
		fmt.Fprintf(&y, "  - {address: 10.0.%d.%d, user: u, role: [worker]}\n", i/250, i%250+1)
	}
	c, diags, err := ParseContext(ctx, []byte(y.String()), "cluster.yml")
	if !errors.Is(err, context.Canceled) || c != nil || diags != nil {
		t.Errorf("ParseContext with a cancelled context = %v, %d diagnostics, %v; want context.Canceled alone", c != nil, len(diags), err)
	}
	if _, _, err := LoadContext(ctx, "../examples/clusters/ha/cluster.yml"); !errors.Is(err, context.Canceled) {
		t.Errorf("LoadContext with a cancelled context: %v, want context.Canceled", err)
	}
	if _, diags, err := ParseContext(context.Background(), []byte(nodesYML), "cluster.yml"); err != nil || diags.HasErrors() {
		t.Errorf("ParseContext: %v %v", err, diags)
	}
}

// TestObjectValuesBounded: a valid-looking cluster.yml of 5.6 MB whose
// secrets encryption configuration holds 57,000 keys is refused, naming
// the field: writing it out for the nodes (reconcile.CheckSpec does, for
// every push serve reads) took 210 MB more.
func TestObjectValuesBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(nodesYML + "services:\n  kube-api:\n    secrets_encryption_config:\n      enabled: true\n      custom_config:\n" +
		"        apiVersion: apiserver.config.k8s.io/v1\n        kind: EncryptionConfiguration\n        resources:\n" +
		"        - resources: [secrets]\n          providers:\n          - aescbc:\n              keys:\n")
	for i := 0; i < 57000; i++ {
		fmt.Fprintf(&b, "              - name: key%d\n                secret: c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI=\n", i)
	}
	_, diags := Parse([]byte(b.String()), "cluster.yml")
	var found bool
	for _, d := range diags {
		if d.Severity == SeverityError && d.Path == "services.kube-api.secrets_encryption_config.custom_config" &&
			strings.Contains(d.Summary, "more than the 10000 rigger takes in one") {
			found = true
		}
	}
	if !found {
		t.Fatalf("57,000 encryption keys: %v, want the custom_config refused", diags.Err())
	}
	// A configuration of the usual size passes.
	small := b.String()[:strings.Index(b.String(), "              - name: key3\n")]
	if _, diags := Parse([]byte(small), "cluster.yml"); diags.Err() != nil {
		t.Errorf("3 encryption keys: %v", diags.Err())
	}
}
