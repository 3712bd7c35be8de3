package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rigger/rigger/sandbox"
)

func TestSandboxHelp(t *testing.T) {
	out, _, code := run(t, "sandbox", "--help")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, want := range []string{"up", "down", "status", "node", "docs/sandbox.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("rigger sandbox --help lacks %q:\n%s", want, out)
		}
	}
	for _, sub := range [][]string{{"up"}, {"down"}, {"status"}, {"node"}} {
		out, _, code := run(t, append([]string{"sandbox"}, append(sub, "--help")...)...)
		if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "--name") {
			t.Errorf("rigger sandbox %s --help (exit %d) lacks examples or --name:\n%s", sub[0], code, out)
		}
	}
}

func TestSandboxNodeArgs(t *testing.T) {
	if _, stderr, code := run(t, "sandbox", "node", "stop"); code == 0 || !strings.Contains(stderr, "accepts 2 arg") {
		t.Errorf("sandbox node stop without a node: exit %d, %q", code, stderr)
	}
	if _, stderr, code := run(t, "sandbox", "node", "frob", "node1"); code == 0 || !strings.Contains(stderr, "use stop, start, partition or heal") {
		t.Errorf("sandbox node frob: exit %d, %q", code, stderr)
	}
}

func TestPrintSandbox(t *testing.T) {
	s := &sandbox.Sandbox{
		Name:           "demo",
		Nodes:          []sandbox.Node{{Name: "node1", Hostname: "demo-node1", Address: "10.231.0.11", User: "root", Port: 22}},
		KeyPath:        "/k/id_ed25519",
		KnownHostsPath: "/k/known_hosts",
		SystemImages:   map[string]string{"kubernetes": "rigger-sandbox/hyperkube:v1.32.13", "etcd": "rigger-sandbox/etcd:v3.5.16"},
	}
	var b bytes.Buffer
	if err := printSandbox(&b, s); err != nil {
		t.Fatal(err)
	}
	want := `NODE   HOSTNAME    ADDRESS      USER  PORT
node1  demo-node1  10.231.0.11  root  22

SSH key:      /k/id_ed25519
known_hosts:  /k/known_hosts
Try:          ssh -i /k/id_ed25519 -o UserKnownHostsFile=/k/known_hosts root@10.231.0.11 docker ps

# cluster.yml: use the images loaded in the nodes
system_images:
  etcd: rigger-sandbox/etcd:v3.5.16
  kubernetes: rigger-sandbox/hyperkube:v1.32.13
`
	if b.String() != want {
		t.Errorf("printSandbox:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestPrintVersionImages(t *testing.T) {
	var b bytes.Buffer
	if err := printVersionImages(&b, []string{"v1.34.4", sandbox.KubernetesVersion, "v1.33.13", "v1.34.4-rancher1-1"}); err != nil {
		t.Fatal(err)
	}
	want := `
# Kubernetes v1.34.4: the same, with these system_images
#   etcd: rigger-sandbox/etcd:v3.6.16
#   kubernetes: rigger-sandbox/hyperkube:v1.34.4

# Kubernetes v1.33.13: the same, with these system_images
#   etcd: rigger-sandbox/etcd:v3.5.35
#   kubernetes: rigger-sandbox/hyperkube:v1.33.13
`
	if b.String() != want {
		t.Errorf("printVersionImages:\n%s\nwant:\n%s", b.String(), want)
	}
	if err := printVersionImages(&b, []string{"v1.20.0"}); err == nil {
		t.Error("printVersionImages of a version the sandbox does not build: want an error")
	}
}

func TestSandboxImagesFlags(t *testing.T) {
	out, _, code := run(t, "sandbox", "images", "--help")
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	for _, want := range []string{"--kubernetes", "v1.33.13 (etcd v3.5.35)", "v1.34.4 (etcd v3.6.16)", "--build-src"} {
		if !strings.Contains(out, want) {
			t.Errorf("rigger sandbox images --help lacks %q:\n%s", want, out)
		}
	}
}
