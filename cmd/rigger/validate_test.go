package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateEscapesTerminalSequences: a cluster.yml whose unknown key
// holds a carriage return and escape sequences (erase the line, green
// "valid") cannot forge a line of validate's output: they are printed
// escaped.
func TestValidateEscapesTerminalSequences(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cluster.yml")
	yml := "nodes:\n  - {address: 10.0.0.1, user: root, role: [etcd, controlplane, worker]}\n" +
		"\"x\\r\\e[2K\\e[32mcluster.yml: valid\\e[0m\": 1\n"
	if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code := run(t, "validate", "-f", file)
	if code == 0 {
		t.Fatalf("validate of an unknown key: exit 0\n%s", out)
	}
	if strings.ContainsAny(out+stderr, "\r\x1b") {
		t.Errorf("validate printed a control character from the file:\n%q", out+stderr)
	}
	if !strings.Contains(out, `x\x0d\x1b[2K`) {
		t.Errorf("validate does not show the key escaped:\n%s", out)
	}
}
