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

// TestUpgradeInPlace: once rigger's file is replaced while it runs (an
// upgrade in place), the binary copied to the nodes is still the running
// one, whose build ID Get read when it planned: every re-creation of a
// container that runs it failed, until serve restarted, when the new
// file was copied.
func TestUpgradeInPlace(t *testing.T) {
	if os.Getenv("NODEBIN_UPGRADE_CHILD") != "" {
		upgradeChild(t)
		return
	}
	if _, err := os.Stat("/proc/self/exe"); err != nil {
		t.Skip("no /proc/self/exe")
	}
	nodebin.Use(os.Args[0])
	_, err := nodebin.Get()
	nodebin.Use("")
	if err != nil {
		t.Skipf("the test binary cannot stand for rigger's (-race links it dynamically): %v", err)
	}
	exe := filepath.Join(t.TempDir(), "rigger")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestUpgradeInPlace$", "-test.count=1")
	cmd.Env = append(os.Environ(), "NODEBIN_UPGRADE_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the child: %v\n%s", err, out)
	}
}

// upgradeChild is TestUpgradeInPlace's child: it reads its own binary,
// replaces its file with another build (the same bytes, another build ID),
// and opens the binary to copy.
func upgradeChild(t *testing.T) {
	before, err := nodebin.Get()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), before.ID)
	if i < 0 {
		t.Fatal("the build ID is not in the binary")
	}
	b[i] ^= 1 // another build
	if err := os.WriteFile(exe+".new", b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	f, after, err := nodebin.Open()
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if after.ID != before.ID {
		t.Fatalf("after the file was replaced, the binary to copy has build ID %s, not the running one's %s", after.ID, before.ID)
	}
}
