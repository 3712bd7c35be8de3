package layering

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// TestPackageDocs: every package of the module has one package doc
// comment (STYLE.md), and it starts as godoc wants: "Package <name>" (for
// a command, anything).
func TestPackageDocs(t *testing.T) {
	problems, n, err := packageDocProblems(os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found %d packages in the module, want many more: is the walk starting from its root?", n)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestPackageDocProblems shows that packageDocProblems finds each kind of
// problem, so that TestPackageDocs can fail.
func TestPackageDocProblems(t *testing.T) {
	file := func(doc, pkg string) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte(doc + "package " + pkg + "\n")}
	}
	fsys := fstest.MapFS{
		"good/a.go":          file("// Package good does one thing.\n", "good"),
		"good/b.go":          file("", "good"),
		"good/b_test.go":     file("// Package good is tested here too.\n", "good"),
		"none/a.go":          file("", "none"),
		"two/a.go":           file("// Package two is here.\n", "two"),
		"two/b.go":           file("// Package two is here too.\n", "two"),
		"named/a.go":         file("// This package is named.\n", "named"),
		"cmd/tool/main.go":   file("// Tool does one thing.\n", "main"),
		"nested/go.mod":      {Data: []byte("module nested\n")},
		"nested/a.go":        file("", "nested"),
		"good/testdata/x.go": file("", "x"),
	}
	problems, n, err := packageDocProblems(fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"named: its package doc does not start with \"Package named\"",
		"none: no package doc comment: write one, in the file named for the package or in doc.go",
		"two: 2 package doc comments (a.go, b.go): keep one",
	}
	if n != 5 || !slices.Equal(problems, want) {
		t.Errorf("%d packages, problems:\n%s\nwant 5 and:\n%s", n, strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}

// packageDocProblems reads the package clauses of the non-test .go files
// of the module in fsys (skipping testdata, hidden directories and nested
// modules, as the go tool does) and says, package by package, what is
// wrong with its package docs; n is how many packages it read.
func packageDocProblems(fsys fs.FS) (problems []string, n int, err error) {
	type pkg struct {
		name  string
		files []string // with a doc comment
		doc   string
	}
	pkgs := map[string]*pkg{}
	fset := token.NewFileSet()
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != "." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return fs.SkipDir
			}
			if _, err := fs.Stat(fsys, path.Join(p, "go.mod")); err == nil && p != "." {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse package clause: %w", err)
		}
		dir := path.Dir(p)
		if pkgs[dir] == nil {
			pkgs[dir] = &pkg{name: f.Name.Name}
		}
		if f.Doc != nil {
			pkgs[dir].files = append(pkgs[dir].files, path.Base(p))
			pkgs[dir].doc = f.Doc.Text()
		}
		return nil
	})
	for _, dir := range slices.Sorted(maps.Keys(pkgs)) {
		p := pkgs[dir]
		switch {
		case len(p.files) == 0:
			problems = append(problems, dir+": no package doc comment: write one, in the file named for the package or in doc.go")
		case len(p.files) > 1:
			problems = append(problems, fmt.Sprintf("%s: %d package doc comments (%s): keep one", dir, len(p.files), strings.Join(p.files, ", ")))
		case p.name != "main" && !strings.HasPrefix(p.doc, "Package "+p.name+" "):
			problems = append(problems, fmt.Sprintf("%s: its package doc does not start with %q", dir, "Package "+p.name))
		}
	}
	return problems, len(pkgs), err
}
