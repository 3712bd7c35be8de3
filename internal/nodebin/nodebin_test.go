package nodebin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/nodebin"
	"github.com/rigger/rigger/internal/nodebin/nodebintest"
)

// TestGet: a static Go binary is read with its Go build ID (the content
// part `go tool buildid` prints last) and architecture; what cannot run
// in an image without libraries, or is not a Go binary at all, is refused
// with the reason, also when its note is cut short.
func TestGet(t *testing.T) {
	t.Cleanup(func() { nodebin.Use("") })
	static := nodebintest.Build(t)
	nodebin.Use(static)
	b, err := nodebin.Get()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", static).Output()
	if err != nil {
		t.Fatal(err)
	}
	full := strings.TrimSpace(string(out))
	if want := full[strings.LastIndexByte(full, '/')+1:]; b.ID != want || b.Arch != runtime.GOARCH || b.Path != static {
		t.Errorf("Get = %+v, want ID %s, arch %s", b, want, runtime.GOARCH)
	}
	f, opened, err := nodebin.Open()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if opened != b {
		t.Errorf("Open = %+v, Get = %+v", opened, b)
	}

	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	os.WriteFile(text, []byte("#!/bin/sh\necho hi\n"), 0o755)
	whole, _ := os.ReadFile(static)
	cut := filepath.Join(dir, "cut")
	os.WriteFile(cut, whole[:4096], 0o755)
	for _, tc := range []struct{ path, want string }{
		{"/bin/sh", "dynamically linked"},
		{text, "bad magic number"},
		{filepath.Join(dir, "missing"), "no such file"},
		{cut, ""},
	} {
		nodebin.Use(tc.path)
		_, err := nodebin.Get()
		if err == nil || !strings.Contains(err.Error(), "rigger's own binary cannot run on the nodes") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Get of %s: %v, want an error with %q", tc.path, err, tc.want)
		}
	}
}
