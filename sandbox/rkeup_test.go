package sandbox

import (
	"archive/zip"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The stand-in's rke-etcd-backup leaves what rke-tools' does: <name>.zip,
// mode 0600, holding the snapshot (and RKE's cluster state, when RKE put
// it in /etc/kubernetes), deflated, and neither file it zipped. It runs
// here, chrooted into the stand-in image's own busybox, zip and
// libraries, with an etcdctl that writes a known snapshot.
func TestRKEEtcdBackupZipsAsRKETools(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	if _, err := os.Stat(rkeZip); err != nil {
		t.Skipf("%v (make prereqs installs zip)", err)
	}
	ctx := context.Background()
	spec, err := rkeToolsStandInSpec(ctx, fakePrograms(t), "/nonexistent/rigger", "/nonexistent/etcd")
	if err != nil {
		t.Fatal(err)
	}
	snapshot := bytes.Repeat([]byte("etcd snapshot "), 100)
	const etcdctl = "#!/bin/sh\n# writes the snapshot of `snapshot save FILE`\n" +
		"for last; do :; done\nprintf 'etcd snapshot %.0s' $(seq 100) >\"$last\"\n"
	root := t.TempDir()
	for _, f := range spec.files {
		switch {
		case f.dst == "/usr/local/bin/etcdctl":
			f = imageFile{dst: f.dst, content: etcdctl, mode: 0o755}
		case strings.HasPrefix(f.src, "/nonexistent/"):
			continue
		}
		rc, _, err := f.open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(root, f.dst), b, os.FileMode(f.mode))
	}
	for _, l := range spec.links {
		if err := os.Symlink(l.target, filepath.Join(root, l.path)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"backup", "etc/kubernetes", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	state := []byte(`{"desiredState":{}}`)
	writeFile(t, filepath.Join(root, "etc/kubernetes/with-state.rkestate"), state, 0o600)

	for _, tt := range []struct {
		name    string
		entries []string
		content [][]byte
	}{
		{"rolling", []string{"backup/rolling"}, [][]byte{snapshot}},
		{"with-state", []string{"backup/with-state", "etc/kubernetes/with-state.rkestate"}, [][]byte{snapshot, state}},
	} {
		cmd := exec.Command("chroot", root, "/bin/sh", rkeToolsDir+"/rke-etcd-backup", "etcd-backup", "save",
			"--cacert", "ca.pem", "--cert", "c.pem", "--key", "k.pem", "--name", tt.name, "--endpoints=127.0.0.1:2379", "--once")
		cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: rke-etcd-backup: %v\n%s", tt.name, err, out)
		}
		zipPath := filepath.Join(root, "backup", tt.name+".zip")
		fi, err := os.Stat(zipPath)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v; want the zip, mode 0600", tt.name, err, fi)
		}
		zr, err := zip.OpenReader(zipPath)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for i, f := range zr.File {
			names = append(names, f.Name)
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			// Info-ZIP stores a file that deflate would not shrink (the
			// state here); rke-tools deflates every one.
			if err != nil || i == 0 && f.Method != zip.Deflate || i >= len(tt.content) || !bytes.Equal(b, tt.content[i]) {
				t.Errorf("%s: entry %s (method %d): %d bytes, %v; want what was zipped, the snapshot deflated", tt.name, f.Name, f.Method, len(b), err)
			}
		}
		zr.Close()
		if !slices.Equal(names, tt.entries) {
			t.Errorf("%s: entries %q, want %q (rke-tools' paths, as Info-ZIP stores them)", tt.name, names, tt.entries)
		}
		left, _ := filepath.Glob(filepath.Join(root, "backup", "*"))
		hidden, _ := filepath.Glob(filepath.Join(root, "backup", ".*"))
		if _, err := os.Stat(filepath.Join(root, "backup", tt.name)); !os.IsNotExist(err) || len(hidden) > 0 {
			t.Errorf("%s: the zipped snapshot or a temporary file is left: %v %v", tt.name, left, hidden)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/kubernetes/with-state.rkestate")); !os.IsNotExist(err) {
		t.Errorf("the zipped state file is left (%v)", err)
	}
}

func writeFile(t *testing.T, p string, b []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, mode); err != nil {
		t.Fatal(err)
	}
}
