package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// entries lists dir's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteReplacesWithMode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		old, perm os.FileMode
	}{
		{name: "narrower", old: 0o644, perm: 0o600}, // a file that was 0644 holds a key now
		{name: "wider", old: 0o600, perm: 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "kubeconfig")
			if err := os.WriteFile(p, []byte("old"), tc.old); err != nil {
				t.Fatal(err)
			}
			if err := Write(p, []byte("new"), tc.perm); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil || string(b) != "new" {
				t.Fatalf("read back %q, %v; want %q", b, err, "new")
			}
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != tc.perm {
				t.Errorf("mode %v, want %v", fi.Mode().Perm(), tc.perm)
			}
			if got := entries(t, dir); !slices.Equal(got, []string{"kubeconfig"}) {
				t.Errorf("directory holds %q, want the file alone", got)
			}
		})
	}
}

func TestWriteFailureLeavesNoTrace(t *testing.T) {
	fillErr := errors.New("source failed")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, p string) // makes the write fail
		fill  func(io.Writer) error
		want  error
	}{
		{
			name: "fill fails",
			setup: func(t *testing.T, p string) {
				if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			fill: func(w io.Writer) error { _, _ = w.Write([]byte("half")); return fillErr },
			want: fillErr,
		},
		{
			// Renaming a file over a directory fails (EISDIR), after the
			// temporary file was written in full.
			name: "rename fails",
			setup: func(t *testing.T, p string) {
				if err := os.MkdirAll(filepath.Join(p, "inside"), 0o700); err != nil {
					t.Fatal(err)
				}
			},
			fill: func(w io.Writer) error { _, err := w.Write([]byte("new")); return err },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "state.json")
			tc.setup(t, p)
			err := WriteFunc(p, 0o600, tc.fill)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want an error (wrapping %v)", err, tc.want)
			}
			if got := entries(t, dir); !slices.Equal(got, []string{"state.json"}) {
				t.Errorf("directory holds %q after a failed write, want the old file alone", got)
			}
			if fi, _ := os.Stat(p); !fi.IsDir() {
				if b, _ := os.ReadFile(p); string(b) != "old" {
					t.Errorf("the old file holds %q, want it untouched", b)
				}
			}
		})
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "f")
	if err := Write(p, []byte("x"), 0o600); err == nil {
		t.Fatal("wrote into a directory that does not exist")
	}
}
