package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Writers that come and go on the control FIFO, many at once as a
// sandbox's nodes start their services, each have their script started.
// And the init holds the FIFO open for writing itself: a loop that reopens
// the FIFO once its writers are gone drops a line written between its read
// of the end and its close (seen once: two of a sandbox's four nodes never
// started containerd).
func TestInitStartsEveryScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "init")
	services := filepath.Join(root, "node1", "services")
	out := filepath.Join(root, "out")
	for _, d := range []string{dir, services, out} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "init.sh"), []byte(initScript), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "control"), 0o600); err != nil {
		t.Fatal(err)
	}
	const scripts = 200
	for i := range scripts {
		script := fmt.Sprintf("touch %s/%d\n", out, i)
		if err := os.WriteFile(filepath.Join(services, fmt.Sprintf("s%d.sh", i)), []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", filepath.Join(dir, "init.sh"), dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range scripts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := writeControl(ctx, filepath.Join(dir, "control"), filepath.Join(services, fmt.Sprintf("s%d.sh", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := holdsForWriting(cmd.Process.Pid, filepath.Join(dir, "control")); err != nil {
		t.Error(err)
	}
	err := waitFor(ctx, 30*time.Second, 20*time.Millisecond, "every script run", func() error {
		ran, err := os.ReadDir(out)
		if err != nil {
			return err
		}
		if len(ran) < scripts {
			return fmt.Errorf("%d of %d scripts ran", len(ran), scripts)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// holdsForWriting says whether process pid has file path open for writing.
func holdsForWriting(pid int, path string) error {
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(fds)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if target, _ := os.Readlink(filepath.Join(fds, e.Name())); target != path {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			return err
		}
		var pos, flags int
		if _, err := fmt.Sscanf(string(info), "pos:\t%d\nflags:\t%o", &pos, &flags); err != nil {
			return fmt.Errorf("fdinfo of %s: %w", path, err)
		}
		if flags&unix.O_ACCMODE != unix.O_RDONLY {
			return nil
		}
	}
	return fmt.Errorf("the init does not hold %s open for writing", path)
}
