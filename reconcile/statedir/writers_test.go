package statedir

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fileWriters are the calls that change files outside statedir.
var fileWriters = map[string][]string{
	"os":         {"WriteFile", "Remove", "RemoveAll", "Rename", "Create", "CreateTemp", "OpenFile", "Truncate", "Symlink", "Link"},
	"atomicfile": {"Write", "WriteFunc"},
}

// notStateWriters are the files of reconcile and gitops that change files
// without statedir, and why none of them is a state file: under a
// directory bound to a Backend (rigger serve's Secrets), a state file
// written any other way would be lost with the pod.
var notStateWriters = map[string]string{
	"reconcile/lock/file.go":                   "the cluster's lock: the machine's own, never copied (LockFile)",
	"reconcile/secretstate/secretstate.go":     "the backend itself fills the directory from the Secrets",
	"reconcile/etcdsnap/s3test/s3test.go":      "a test S3 server's files",
	"reconcile/reconciletest/reconciletest.go": "tests' cluster.yml files",
	"reconcile/etcdsnap/unzip.go":              "an RKE snapshot unzipped to a temporary file, removed after the restore",
	"reconcile/etcdsnap/restorecheck.go":       "removes the temporary file unzip.go made",
}

// TestStateWrittenOnlyThroughStatedir: reconcile and gitops write and
// remove files only through statedir, but for the files listed in
// notStateWriters. A new writer of a state file must use statedir (or, if
// it writes no state file, be listed with the reason).
func TestStateWrittenOnlyThroughStatedir(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	for _, top := range []string{"reconcile", "gitops"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if strings.HasPrefix(rel, "reconcile/statedir/") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if !ok || !slices.Contains(fileWriters[pkg.Name], sel.Sel.Name) {
					return true
				}
				if _, ok := notStateWriters[rel]; ok {
					seen[rel] = true
					return true
				}
				t.Errorf("%s: %s.%s changes a file without statedir: write state files with statedir.WriteFile/WriteJSON "+
					"and remove them with statedir.Remove/RemoveAll, or list the file in notStateWriters with why it writes no state",
					fset.Position(call.Pos()), pkg.Name, sel.Sel.Name)
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for f := range notStateWriters {
		if !seen[f] {
			t.Errorf("%s is listed in notStateWriters and changes no file: drop it from the list", f)
		}
	}
}
