package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJSONRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	type rec struct{ A string }
	var got []rec
	if err := ReadJSON(dir, "x.json", &got); err != nil || got != nil {
		t.Fatalf("missing file: %v, %v; want no error and v untouched", got, err)
	}
	want := []rec{{"one"}, {"two"}}
	if err := WriteJSON(dir, "x.json", want); err != nil {
		t.Fatal(err)
	}
	if err := ReadJSON(dir, "x.json", &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for p, mode := range map[string]os.FileMode{dir: dirMode, filepath.Join(dir, "x.json"): fileMode} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", p, fi.Mode().Perm(), mode)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%d entries in the state directory, want the file alone (no temporary file left)", len(entries))
	}
}

func TestDamagedFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	var v map[string]string
	err := ReadJSON(dir, "x.json", &v)
	var damaged *DamagedError
	if !errors.As(err, &damaged) || damaged.Path != filepath.Join(dir, "x.json") {
		t.Errorf("got %v, want a *DamagedError naming the file", err)
	}
}

func TestUnreadableIsNotDamaged(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "x.json"), 0o700); err != nil { // a directory: read fails
		t.Fatal(err)
	}
	var v map[string]string
	err := ReadJSON(dir, "x.json", &v)
	var damaged *DamagedError
	if err == nil || errors.As(err, &damaged) {
		t.Errorf("got %v, want an I/O error that is not a *DamagedError", err)
	}
}
