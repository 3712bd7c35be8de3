package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiskShort(t *testing.T) {
	for _, tc := range []struct {
		nodes int
		free  uint64
		want  string // "" when enough
	}{
		{nodes: 3, free: 4 << 30},
		{nodes: 3, free: 10 << 30},
		{nodes: 3, free: 4<<30 - 1, want: "/var/lib has 4.0 GiB free; 3 node(s) need about 4.0 GiB"},
		{nodes: 4, free: 2576980377, want: "/var/lib has 2.4 GiB free; 4 node(s) need about 5.0 GiB"},
		{nodes: 1, free: 0, want: "/var/lib has 0.0 GiB free; 1 node(s) need about 2.0 GiB"},
	} {
		err := diskShort("test51", "/var/lib", tc.nodes, tc.free)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%d nodes, %d bytes free: %v, want nil", tc.nodes, tc.free, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sandbox test51: ") {
			t.Errorf("%d nodes, %d bytes free: %v, want sandbox test51: ...%s...", tc.nodes, tc.free, err, tc.want)
		}
	}
}

func TestNearestDir(t *testing.T) {
	dir := t.TempDir()
	if got := nearestDir(filepath.Join(dir, "a", "b")); got != dir {
		t.Errorf("nearestDir of a missing path = %s, want %s", got, dir)
	}
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := nearestDir(filepath.Join(dir, "a")); got != filepath.Join(dir, "a") {
		t.Errorf("nearestDir of an existing path = %s", got)
	}
}
