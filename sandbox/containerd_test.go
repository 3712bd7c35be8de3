package sandbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestContainerdConfig(t *testing.T) {
	s := layout("rigger", 0, 1)
	got := s.containerdConfig(s.Nodes[0])
	for _, want := range []string{
		"version = 2\n",
		`root = "/var/lib/containerd"`,
		`state = "/run/containerd"`,
		`address = "/run/containerd/containerd.sock"`,
		`sandbox_image = "rigger-sandbox/pause:3.10"`,
		`BinaryName = "/var/lib/rigger-sandbox/rigger/bin/runc-sandbox"`,
		"SystemdCgroup = false",
		`bin_dir = "/opt/cni/bin"`,
		`conf_dir = "/etc/cni/net.d"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, got)
		}
	}
}

// The runc wrapper edits the OCI bundle and exec process files: run it
// with a runc that prints what it was given.
func TestRuncWrapper(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("no jq")
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "runc-sandbox")
	fakeRunc := "#!/bin/sh\necho \"runc $*\"\n"
	for path, content := range map[string]string{wrapper: runcWrapper, filepath.Join(dir, "runc"): fakeRunc} {
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bundle := filepath.Join(dir, "bundle")
	if err := os.Mkdir(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(bundle, "config.json")
	process := filepath.Join(dir, "process.json")
	files := map[string]string{
		config:  `{"process":{"args":["/pause"],"oomScoreAdj":-998,"capabilities":{"bounding":["CAP_KILL","CAP_SYS_RESOURCE"],"effective":["CAP_SYS_RESOURCE"]}},"root":{"path":"rootfs"}}`,
		process: `{"args":["sh"],"oomScoreAdj":5,"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_CHOWN"]}}`,
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(wrapper, args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "runc "+strings.Join(args, " ")) {
			t.Fatalf("wrapper %v: %v: %s", args, err, out)
		}
	}
	run("--root", "/run/runc", "create", "--bundle", bundle, "id1")
	run("exec", "--process", process, "id1")

	for path, want := range map[string]string{
		config:  `{"process":{"args":["/pause"],"oomScoreAdj":0,"capabilities":{"bounding":["CAP_KILL"],"effective":[]}},"root":{"path":"rootfs"}}`,
		process: `{"args":["sh"],"oomScoreAdj":5,"capabilities":{"bounding":["CAP_CHOWN"]}}`,
	} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var got, w any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		_ = json.Unmarshal([]byte(want), &w)
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s after the wrapper (-want +got):\n%s", filepath.Base(path), diff)
		}
	}
}

// fakeCRI is a CRI server for the client's tests: gRPC over HTTP/2
// without TLS on a Unix socket, as containerd serves it.
func fakeCRI(t *testing.T, handle func(method string, req []byte) (resp []byte, status string)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.ProtoMajor != 2 || r.Header.Get("Content-Type") != "application/grpc" || len(body) < 5 ||
			int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
			http.Error(w, "not gRPC", http.StatusBadRequest)
			return
		}
		resp, status := handle(r.URL.Path, body[5:])
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		if status == "0" {
			frame := make([]byte, 5+len(resp))
			binary.BigEndian.PutUint32(frame[1:5], uint32(len(resp)))
			copy(frame[5:], resp)
			_, _ = w.Write(frame)
		}
		w.Header().Set("Grpc-Status", status)
		if status != "0" {
			w.Header().Set("Grpc-Message", "no such method")
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

func TestCRIClient(t *testing.T) {
	ctx := context.Background()
	const pause = "rigger-sandbox/pause:3.10"
	sock := fakeCRI(t, func(method string, req []byte) ([]byte, string) {
		switch method {
		case "/runtime.v1.RuntimeService/Version":
			return concat(protoBytesField(1, []byte("0.1.0")), []byte{0x28, 0x01}, // an unknown varint field is skipped
				protoBytesField(2, []byte("containerd")), protoBytesField(3, []byte("1.6.20")), protoBytesField(4, []byte("v1"))), "0"
		case "/runtime.v1.ImageService/ImageStatus":
			f, err := protoStrings(req)
			if err != nil || len(f[1]) != 1 {
				return nil, "3"
			}
			spec, _ := protoStrings(f[1][0])
			if first(spec[1]) != pause {
				return nil, "0" // no such image: an empty response
			}
			img := concat(protoBytesField(1, []byte("sha256:abc")), protoBytesField(2, []byte("docker.io/"+pause)), []byte{0x20, 0x80, 0x10})
			return protoBytesField(1, img), "0"
		}
		return nil, "12"
	})

	v, err := CRIVersion(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(CRIRuntime{Version: "0.1.0", RuntimeName: "containerd", RuntimeVersion: "1.6.20", RuntimeAPIVersion: "v1"}, v); diff != "" {
		t.Errorf("CRIVersion (-want +got):\n%s", diff)
	}
	img, err := CRIImageStatus(ctx, sock, pause)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&CRIImage{ID: "sha256:abc", RepoTags: []string{"docker.io/" + pause}}, img); diff != "" {
		t.Errorf("CRIImageStatus (-want +got):\n%s", diff)
	}
	if img, err := CRIImageStatus(ctx, sock, "other:1"); err != nil || img != nil {
		t.Errorf("CRIImageStatus of a missing image = %v, %v; want nil, nil", img, err)
	}

	// An error status is an error.
	failing := fakeCRI(t, func(string, []byte) ([]byte, string) { return nil, "12" })
	if _, err := CRIVersion(ctx, failing); err == nil || !strings.Contains(err.Error(), `gRPC status "12"`) {
		t.Errorf("CRIVersion of a failing runtime: %v", err)
	}
	// No socket.
	if _, err := CRIVersion(ctx, filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Error("CRIVersion without a socket: no error")
	}
}

func TestProtoStringsRejectsBadInput(t *testing.T) {
	for name, b := range map[string][]byte{
		"truncated length": {0x0a, 0x05, 'a'},
		"truncated varint": {0x08, 0x80},
		"wire type 3":      {0x0b},
		"short fixed64":    {0x09, 1, 2},
	} {
		if _, err := protoStrings(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func concat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
