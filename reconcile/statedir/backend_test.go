package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// memBackend is a Backend in memory that refuses the files in refuse.
type memBackend struct {
	files  map[string]string
	refuse map[string]bool
}

var errRefused = errors.New("refused")

func (m *memBackend) Put(name string, b []byte) error {
	if m.refuse[name] {
		return errRefused
	}
	m.files[name] = string(b)
	return nil
}

func (m *memBackend) Delete(name string) error {
	if m.refuse[name] {
		return errRefused
	}
	delete(m.files, name)
	return nil
}

// TestBoundWritesGoThrough: under a bound directory, writes and removes
// reach the backend first, sub-directories included, and one the backend
// refuses changes nothing on disk; an unbound directory is untouched.
func TestBoundWritesGoThrough(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	mem := &memBackend{files: map[string]string{}, refuse: map[string]bool{}}
	unbind, err := Bind(dir, mem)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(dir, "a.pem", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := WriteJSON(filepath.Join(dir, "ca-rotation", "old"), "b.json", []string{"b"}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "ca-rotation", "new"), "c.pem", []byte("c")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.pem": "a", "ca-rotation/old/b.json": "[\n  \"b\"\n]\n", "ca-rotation/new/c.pem": "c"}
	if diff := cmp.Diff(want, mem.files); diff != "" {
		t.Fatalf("backend after the writes (-want +got):\n%s", diff)
	}

	mem.refuse["a.pem"] = true
	if err := WriteFile(dir, "a.pem", []byte("changed")); !errors.Is(err, errRefused) {
		t.Fatalf("a write the backend refuses: got %v, want its error", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.pem")); string(b) != "a" {
		t.Errorf("a refused write changed the file on disk to %q", b)
	}
	if err := Remove(dir, "a.pem"); !errors.Is(err, errRefused) {
		t.Fatalf("a remove the backend refuses: got %v, want its error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.pem")); err != nil {
		t.Errorf("a refused remove removed the file: %v", err)
	}
	mem.refuse["a.pem"] = false

	if err := RemoveAll(dir, "ca-rotation"); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir, "a.pem"); err != nil {
		t.Fatal(err)
	}
	if len(mem.files) != 0 {
		t.Errorf("backend after the removes: %v, want nothing", mem.files)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("state directory after the removes holds %d entries, want none", len(entries))
	}
	if err := RemoveAll(dir, ".."); err == nil {
		t.Error("RemoveAll of .. is not refused")
	}

	unbind()
	if err := WriteFile(dir, "d.pem", []byte("d")); err != nil {
		t.Fatal(err)
	}
	if len(mem.files) != 0 {
		t.Errorf("a write after unbind reached the backend: %v", mem.files)
	}
}
