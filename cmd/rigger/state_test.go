package main

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateCommandRefusals: rigger state refuses, before it reaches any
// API server, what it cannot move.
func TestStateCommandRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no cluster", []string{"state", "export"}, "give the cluster: --cluster"},
		{"import of no directory", []string{"state", "import", "--cluster", "c", "--state-dir", filepath.Join(t.TempDir(), "none")},
			"give its rigger apply's state directory (--state-dir)"},
		{"no kubeconfig", []string{"state", "export", "--cluster", "c", "--state-dir", t.TempDir(), "--kubeconfig", filepath.Join(t.TempDir(), "none")},
			"give --kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			root := newRootCommand(&out, &out)
			root.SetArgs(tc.args)
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("rigger %s: got %v, want an error that says %q", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
}

// TestServeStateBackendFlags: --state-backend takes directory (no
// backend) or kubernetes, which needs --state-dir as its working copy.
func TestServeStateBackendFlags(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, backend := range []string{"", stateBackendDirectory} {
		o := serveOptions{stateBackend: backend}
		if load, err := o.stateStore(log); load != nil || err != nil {
			t.Errorf("--state-backend %q: got %v, %v; want no backend", backend, load != nil, err)
		}
	}
	var o serveOptions
	o = serveOptions{stateBackend: "etcd"}
	if _, err := o.stateStore(log); err == nil || !strings.Contains(err.Error(), "give directory or kubernetes") {
		t.Errorf("an unknown backend: got %v", err)
	}
	o = serveOptions{stateBackend: stateBackendKubernetes}
	if _, err := o.stateStore(log); err == nil || !strings.Contains(err.Error(), "give --state-dir") {
		t.Errorf("kubernetes without --state-dir: got %v", err)
	}
	o = serveOptions{stateBackend: stateBackendKubernetes, stateDir: t.TempDir(), kubeconfig: filepath.Join(t.TempDir(), "none")}
	if _, err := o.stateStore(log); err == nil || !strings.Contains(err.Error(), "--state-backend kubernetes") {
		t.Errorf("kubernetes with a kubeconfig that is not there: got %v", err)
	}
}
