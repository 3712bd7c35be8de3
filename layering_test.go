// Package layering checks that rigger's packages import one another only
// downwards: cmd → gitops → reconcile → reconcile/... → {spec, transport},
// with internal/... below everything, and some of reconcile's parts in an
// order among themselves (siblings). It reads the import lines of the module's
// non-test files with go/parser, so it needs no go tool and takes a moment;
// what tests import is out of its scope.
package layering

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A layer is a part of the module: the packages whose paths, relative to
// the module, match one of its patterns ("spec" is that package,
// "spec/..." every package below it). A package may import the packages of
// its own layer and of the layers in mayImport, nothing else of the module.
type layer struct {
	name      string
	patterns  []string
	mayImport []string
	rule      string // why, for the person who broke it
}

// layers is the project's direction, top first. A package is in the first
// layer one of whose patterns it matches.
var layers = []layer{
	{
		name:      "cmd",
		patterns:  []string{"cmd/..."},
		mayImport: []string{"gitops", "watch", "reconcile", "reconcile/...", "spec", "transport", "sandbox", "nodeproxy", "internal"},
		rule:      "cmd is the top: nothing imports it, and it imports every layer but hack",
	},
	{
		name:      "gitops",
		patterns:  []string{"gitops", "gitops/..."},
		mayImport: []string{"reconcile", "reconcile/...", "spec", "transport", "internal"},
		rule:      "gitops, rigger serve's loop, consumes the engine: it sits below cmd and above reconcile, which never imports it",
	},
	{
		name:      "watch",
		patterns:  []string{"watch"},
		mayImport: []string{"internal"},
		rule:      "watch, the file watcher of rigger apply --watch, is a leaf: it imports nothing of the module but internal/...",
	},
	{
		name:      "reconcile",
		patterns:  []string{"reconcile"},
		mayImport: []string{"reconcile/...", "spec", "transport", "internal"},
		rule:      "the engine sits below cmd and gitops and above its parts, spec and transport",
	},
	{
		name:      "reconcile/...",
		patterns:  []string{"reconcile/..."},
		mayImport: []string{"spec", "transport", "internal"},
		rule:      "reconcile's parts sit below the root package reconcile: they import one another, spec, transport and internal/..., never reconcile itself, cmd or sandbox",
	},
	{
		name:      "spec",
		patterns:  []string{"spec", "spec/..."},
		mayImport: []string{"internal"},
		rule:      "spec, what the user asked for, is a leaf below reconcile: it imports nothing of the module but internal/... (not transport)",
	},
	{
		name:      "transport",
		patterns:  []string{"transport", "transport/..."},
		mayImport: []string{"internal"},
		rule:      "transport, how rigger reaches a node, is a leaf below reconcile: it imports nothing of the module but internal/...",
	},
	{
		name:      "sandbox",
		patterns:  []string{"sandbox", "sandbox/..."},
		mayImport: []string{"internal"},
		rule:      "sandbox, the local nodes of the CLI and the tests, is a leaf: it imports nothing of the module but internal/...",
	},
	{
		name:      "nodeproxy",
		patterns:  []string{"nodeproxy"},
		mayImport: []string{"internal"},
		rule:      "nodeproxy, run on nodes by the CLI, is a leaf: it imports nothing of the module but internal/...",
	},
	{
		name:      "hack",
		patterns:  []string{"hack/..."},
		mayImport: []string{"internal"},
		rule:      "hack holds generators run by hand: nothing imports them, and they import nothing of the module but internal/...",
	},
	{
		name:      "internal",
		patterns:  []string{"internal/..."},
		mayImport: nil,
		rule:      "internal/... is importable by every layer, so it imports nothing of the module but internal/...",
	},
}

// siblings order reconcile's parts among themselves where the order is
// meant: each names the parts a part may import (reconcile/internal/...
// besides), and why. Parts not listed import the others freely, within
// the layers.
var siblings = []struct {
	pkg       string
	mayImport []string
	why       string
}{
	{"reconcile/execute", []string{"reconcile/desired", "reconcile/dockerop", "reconcile/etcdmember", "reconcile/fanout", "reconcile/health", "reconcile/plan"},
		"the executor carries out a plan's steps on the nodes, and knows nothing of what its caller injects around them (the add-ons, the Kubernetes side, snapshots, the staged operations)"},
	{"reconcile/etcdsnap", []string{"reconcile/desired", "reconcile/dockerop", "reconcile/etcdmember", "reconcile/fanout", "reconcile/health", "reconcile/pki", "reconcile/plan", "reconcile/statedir"},
		"snapshots and restores work on etcd through the nodes' engines; a restore applies the cluster again through Cluster.Reapply, never the executor or the decision itself"},
	{"reconcile/plan", []string{"reconcile/desired", "reconcile/etcdmember", "reconcile/observe", "reconcile/stall", "reconcile/storedapi"},
		"the steps are computed from the desired state and the observation alone; what decides around them (package decide) sits above"},
	{"reconcile/staged", []string{"reconcile/desired", "reconcile/plan"},
		"staged is the vocabulary every staged operation implements: it names the types its methods take and nothing else"},
}

// exceptions are the imports against the layers that are meant, each with
// why. Every one must be in use: one that no package needs any more fails
// the test, to be removed.
var exceptions = []struct{ from, to, why string }{
	{"reconcile/reconciletest", "reconcile",
		"reconciletest runs the engine in other packages' tests"},
	{"reconcile/reconciletest", "sandbox",
		"reconciletest runs the engine against a sandbox's nodes"},
	{"reconcile/reconciletest", "sandbox/sandboxtest",
		"reconciletest starts that sandbox as the tests' packages share it"},
	{"internal/apiservertest", "sandbox",
		"apiservertest runs the kube-apiserver the sandbox builds, found by sandbox.KubernetesVersion"},
	{"internal/rkerender", "spec/rkemeta",
		"rkerender checks that hack/rke-render pins the RKE release spec/rkemeta was generated from (rkemeta imports nothing)"},
}

func TestLayering(t *testing.T) {
	module, err := modulePath("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	imports, err := moduleImports(".", module)
	if err != nil {
		t.Fatal(err)
	}
	if len(imports) < 10 {
		t.Fatalf("found %d packages in the module, want many more: is the walk starting from its root?", len(imports))
	}
	for _, v := range check(imports) {
		t.Error(v)
	}
}

// TestCheck shows that check finds each kind of violation, so that
// TestLayering can fail.
func TestCheck(t *testing.T) {
	// valid is the layering as it is meant, every exception in use.
	valid := map[string][]string{
		"cmd/rigger":              {"reconcile", "reconcile/plan", "spec", "transport/sshtun", "sandbox", "nodeproxy", "internal/clip"},
		"reconcile":               {"reconcile/plan", "spec", "transport", "internal/clip"},
		"reconcile/plan":          {"reconcile/observe", "spec/rkemeta"},
		"reconcile/execute":       {"reconcile/plan", "reconcile/internal/apiretry"},
		"reconcile/etcdsnap":      {"reconcile/plan"},
		"reconcile/observe":       {"transport"},
		"gitops":                  {"reconcile", "reconcile/plan"},
		"gitops/webhook":          {"internal/clip"},
		"watch":                   nil,
		"reconcile/reconciletest": {"reconcile", "sandbox", "sandbox/sandboxtest"},
		"internal/apiservertest":  {"sandbox"},
		"spec":                    {"spec/rkemeta", "internal/clip"},
		"spec/rkemeta":            nil,
		"transport/sshtun":        {"transport"},
		"sandbox/sandboxtest":     {"sandbox", "internal/atomicfile"},
		"nodeproxy":               {"internal/ctxwait"},
		"hack/rke-metadata":       {"hack/rke-metadata/rkegen"},
		"internal/rkerender":      {"spec/rkemeta"},
	}
	if v := check(valid); len(v) > 0 {
		t.Fatalf("check of the valid layering:\n%s", strings.Join(v, "\n"))
	}
	for _, tc := range []struct {
		name     string
		from, to string
		want     string // in the one violation
	}{
		{"a part imports the root", "reconcile/plan", "reconcile", "reconcile/plan imports reconcile: " + ruleOf("reconcile/...")},
		{"the engine imports cmd", "reconcile", "cmd/rigger", "reconcile imports cmd/rigger: " + ruleOf("reconcile")},
		{"spec imports transport", "spec", "transport", "spec imports transport: " + ruleOf("spec")},
		{"spec imports reconcile", "spec/rkemeta", "reconcile/pki", "spec/rkemeta imports reconcile/pki: " + ruleOf("spec")},
		{"transport imports reconcile", "transport/sshtun", "reconcile/plan", "transport/sshtun imports reconcile/plan: " + ruleOf("transport")},
		{"transport imports spec", "transport", "spec", "transport imports spec: " + ruleOf("transport")},
		{"a part imports sandbox", "reconcile/observe", "sandbox", "reconcile/observe imports sandbox: " + ruleOf("reconcile/...")},
		{"the engine imports gitops", "reconcile", "gitops", "reconcile imports gitops: " + ruleOf("reconcile")},
		{"a part imports gitops", "reconcile/plan", "gitops/webhook", "reconcile/plan imports gitops/webhook: " + ruleOf("reconcile/...")},
		{"watch imports the engine", "watch", "reconcile", "watch imports reconcile: " + ruleOf("watch")},
		{"the executor imports the add-ons", "reconcile/execute", "reconcile/addons", "reconcile/execute imports reconcile/addons: " + siblingRule("reconcile/execute")},
		{"etcdsnap imports the executor", "reconcile/etcdsnap", "reconcile/execute", "reconcile/etcdsnap imports reconcile/execute: " + siblingRule("reconcile/etcdsnap")},
		{"plan imports the decision", "reconcile/plan", "reconcile/decide", "reconcile/plan imports reconcile/decide: " + siblingRule("reconcile/plan")},
		{"the CLI imports hack", "cmd/rigger", "hack/rke-metadata/rkegen", "cmd/rigger imports hack/rke-metadata/rkegen: " + ruleOf("cmd")},
		{"internal imports a layer above", "internal/clip", "spec", "internal/clip imports spec: " + ruleOf("internal")},
		{"sandbox imports transport", "sandbox", "transport", "sandbox imports transport: " + ruleOf("sandbox")},
		{"a package outside every layer", "tools/gen", "spec", "tools/gen is in no layer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := map[string][]string{}
			for p, imps := range valid {
				g[p] = slices.Clone(imps)
			}
			g[tc.from] = append(g[tc.from], tc.to)
			v := check(g)
			if len(v) != 1 || !strings.Contains(v[0], tc.want) {
				t.Errorf("check with %s importing %s = %q, want one violation with %q", tc.from, tc.to, v, tc.want)
			}
		})
	}
	t.Run("an exception no longer used", func(t *testing.T) {
		g := map[string][]string{}
		for p, imps := range valid {
			g[p] = imps
		}
		g["reconcile/reconciletest"] = []string{"sandbox", "sandbox/sandboxtest"}
		v := check(g)
		if len(v) != 1 || !strings.Contains(v[0], "reconcile/reconciletest no longer imports reconcile") {
			t.Errorf("check with reconciletest no longer importing reconcile = %q, want the exception reported unused", v)
		}
	})
}

func siblingRule(pkg string) string {
	for _, s := range siblings {
		if s.pkg == pkg {
			return s.why
		}
	}
	panic("no sibling rule of " + pkg)
}

func ruleOf(name string) string {
	for _, l := range layers {
		if l.name == name {
			return l.rule
		}
	}
	panic("no layer " + name)
}

// check returns a line for each import of imports (package → the packages
// it imports, paths relative to the module) that goes against layers, and
// for each exception not in use.
func check(imports map[string][]string) []string {
	var out []string
	used := make([]bool, len(exceptions))
	for _, from := range slices.Sorted(maps.Keys(imports)) {
		l, ok := layerOf(from)
		if !ok {
			out = append(out, fmt.Sprintf("%s is in no layer: place it in layering_test.go's table", from))
			continue
		}
		for _, to := range imports[from] {
			if v := outOfOrder(from, to); v != "" {
				out = append(out, v)
				continue
			}
			if allowed(l, to) {
				continue
			}
			if i := slices.IndexFunc(exceptions, func(e struct{ from, to, why string }) bool {
				return e.from == from && e.to == to
			}); i >= 0 {
				used[i] = true
				continue
			}
			out = append(out, fmt.Sprintf("%s imports %s: %s (layer %s may import %s)",
				from, to, l.rule, l.name, strings.Join(append([]string{l.name}, l.mayImport...), ", ")))
		}
	}
	for i, e := range exceptions {
		if !used[i] {
			out = append(out, fmt.Sprintf("%s no longer imports %s: remove the exception from layering_test.go", e.from, e.to))
		}
	}
	return out
}

// outOfOrder says why from must not import its sibling to (siblings);
// "" when it may.
func outOfOrder(from, to string) string {
	i := slices.IndexFunc(siblings, func(s struct {
		pkg       string
		mayImport []string
		why       string
	}) bool {
		return s.pkg == from
	})
	if i < 0 || !matches("reconcile/...", to) || matches("reconcile/internal/...", to) || slices.Contains(siblings[i].mayImport, to) {
		return ""
	}
	return fmt.Sprintf("%s imports %s: %s (%s may import of its siblings %s)", from, to, siblings[i].why, from, strings.Join(siblings[i].mayImport, ", "))
}

func layerOf(pkg string) (layer, bool) {
	for _, l := range layers {
		if slices.ContainsFunc(l.patterns, func(p string) bool { return matches(p, pkg) }) {
			return l, true
		}
	}
	return layer{}, false
}

// allowed says whether a package of layer l may import pkg.
func allowed(l layer, pkg string) bool {
	to, ok := layerOf(pkg)
	return ok && (to.name == l.name || slices.Contains(l.mayImport, to.name))
}

// matches says whether pkg matches pattern, "dir" (that package) or
// "dir/..." (the packages below dir, not dir itself).
func matches(pattern, pkg string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return strings.HasPrefix(pkg, dir+"/")
	}
	return pkg == pattern
}

// modulePath reads the module's path from its go.mod.
func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := s.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", gomod, err)
	}
	return "", fmt.Errorf("%s has no module line", gomod)
}

// moduleImports reads the import lines of every non-test .go file of the
// module rooted at root, and returns each package's imports of the module
// (paths relative to it, "." for the root package). It skips testdata,
// vendor, hidden directories and nested modules (hack/rke-render), as the
// go tool does.
func moduleImports(root, module string) (map[string][]string, error) {
	imports := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("parse imports: %w", err)
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if _, ok := imports[pkg]; !ok {
			imports[pkg] = nil
		}
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", fset.Position(spec.Pos()), spec.Path.Value, err)
			}
			rel, ok := strings.CutPrefix(imp, module+"/")
			if imp == module {
				rel, ok = ".", true
			}
			if ok && !slices.Contains(imports[pkg], rel) {
				imports[pkg] = append(imports[pkg], rel)
			}
		}
		return nil
	})
	return imports, err
}
