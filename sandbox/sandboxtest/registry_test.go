package sandboxtest

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestSubnetRegistry: the table of subnets in this package's doc is the
// subnets the tests use: every sandbox.Options{Subnet: …} of a test
// file of the module is in it under the test's package, and every line of
// it but the default's is used. go test runs the packages in parallel, so
// a subnet in use and not in the table is one the next test may take too.
func TestSubnetRegistry(t *testing.T) {
	registry := registeredSubnets(t)
	used, err := usedSubnets(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if len(used) < 10 {
		t.Fatalf("found %d subnets in the tests, want many more: is the walk starting from the module's root?", len(used))
	}
	for _, n := range slices.Sorted(maps.Keys(used)) {
		pkgs := used[n]
		if len(pkgs) > 1 {
			t.Errorf("subnet %d is used by several packages (%s): give each a subnet of its own", n, strings.Join(pkgs, ", "))
		}
		switch reg, ok := registry[n]; {
		case !ok:
			t.Errorf("subnet %d, used by %s, is not in sandboxtest's table: add it there", n, strings.Join(pkgs, ", "))
		case !slices.Contains(pkgs, reg):
			t.Errorf("subnet %d is %s's in sandboxtest's table, and used by %s", n, reg, strings.Join(pkgs, ", "))
		}
	}
	for n, pkg := range registry {
		if _, ok := used[n]; !ok && n != 0 {
			t.Errorf("subnet %d of sandboxtest's table (%s) is used by no test: remove it", n, pkg)
		}
	}
}

// registryLine is a line of the table in the package doc: a subnet and
// the package (its first word) that uses it.
var registryLine = regexp.MustCompile(`^//\t(\d+)\s+(\S+)`)

// registeredSubnets reads the table of sandboxtest.go's doc: subnet →
// package.
func registeredSubnets(t *testing.T) map[int]string {
	t.Helper()
	b, err := os.ReadFile("sandboxtest.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if m := registryLine.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			if prev, dup := out[n]; dup {
				t.Errorf("subnet %d is twice in the table: %s and %s", n, prev, m[2])
			}
			out[n] = m[2]
		}
	}
	if len(out) < 10 {
		t.Fatalf("read %d lines of the subnet table, want many more: did its layout change?", len(out))
	}
	return out
}

var (
	// subnetField is a sandbox.Options' Subnet: a number or a constant.
	subnetField = regexp.MustCompile(`Subnet:\s*(\w+)`)
	// subnetConst is a constant (or variable) that names a subnet.
	subnetConst = regexp.MustCompile(`(?m)^\s*(?:const\s+)?(\w*[sS]ubnet)\s*=\s*(\d+)\s*$`)
)

// usedSubnets are the subnets the test files of the module under root
// give sandbox.Options, each with the packages (directories relative to
// root) that use it. A Subnet given by a constant is resolved within the
// package's test files; one that is neither a number nor such a constant
// is an error, so that nothing escapes the check.
func usedSubnets(root string) (map[int][]string, error) {
	byDir := map[string][]string{} // dir → its test files' contents
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") || filepath.Base(path) == "registry_test.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		byDir[dir] = append(byDir[dir], string(b))
		return nil
	})
	if err != nil {
		return nil, err
	}
	used := map[int][]string{}
	for dir, files := range byDir {
		consts := map[string]int{}
		for _, f := range files {
			for _, m := range subnetConst.FindAllStringSubmatch(f, -1) {
				consts[m[1]], _ = strconv.Atoi(m[2])
			}
		}
		pkg, err := filepath.Rel(root, dir)
		if err != nil {
			return nil, err
		}
		pkg = filepath.ToSlash(pkg)
		for _, f := range files {
			if !strings.Contains(f, "sandbox.Options{") {
				continue
			}
			for _, m := range subnetField.FindAllStringSubmatch(f, -1) {
				n, err := strconv.Atoi(m[1])
				if err != nil {
					c, ok := consts[m[1]]
					if !ok {
						return nil, fmt.Errorf("%s: Subnet: %s is neither a number nor a constant of its package's tests", pkg, m[1])
					}
					n = c
				}
				if !slices.Contains(used[n], pkg) {
					used[n] = append(used[n], pkg)
				}
			}
		}
	}
	return used, nil
}
