package dockerop

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/rigger/rigger/internal/fuzzcheck"
)

// entry is one member of a test archive.
type entry struct {
	h       tar.Header
	content string
}

// archiveOf is a tar archive of entries, as the Docker archive API gives
// it: names relative to the parent of the directory asked for.
func archiveOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.h
		h.Size = int64(len(e.content))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// headerOnly is an archive cut after h's header, as a node that claims a
// file's size and then stops sends it.
func headerOnly(t testing.TB, h tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := tar.NewWriter(&buf).WriteHeader(&h); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func dirEntry(name string) entry {
	return entry{h: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func fileEntry(name, content string) entry {
	return entry{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o600}, content: content}
}

// nodeArchive is what ReadDir of /etc/kubernetes gets from a node.
func nodeArchive(t testing.TB) []byte {
	return archiveOf(t,
		dirEntry("kubernetes/"), dirEntry("kubernetes/ssl/"),
		fileEntry("kubernetes/ssl/kube-ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
		fileEntry("kubernetes/ssl/kube-ca-key.pem", "-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n"),
		fileEntry("kubernetes/ssl/kubecfg-kube-node.yaml", "apiVersion: v1\nkind: Config\n"),
		entry{h: tar.Header{Typeflag: tar.TypeSymlink, Name: "kubernetes/ssl/link.pem", Linkname: "kube-ca.pem"}},
		fileEntry("kubernetes/admission.yaml", "apiVersion: apiserver.config.k8s.io/v1\n"),
	)
}

func TestReadTar(t *testing.T) {
	files := map[string][]byte{}
	if err := readTar(bytes.NewReader(nodeArchive(t)), "/etc", "/etc/kubernetes", files); err != nil {
		t.Fatal(err)
	}
	if len(files) != 4 || !strings.HasPrefix(string(files["/etc/kubernetes/ssl/kube-ca.pem"]), "-----BEGIN CERTIFICATE") {
		t.Errorf("files = %q, want the 4 regular files by path", files)
	}
}

func TestReadTarRefuses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		archive []byte
		want    string
	}{
		{
			name:    "a name outside the directory",
			archive: archiveOf(t, fileEntry("kubernetes/ssl/../../passwd", "root:x:0:0")),
			want:    "outside /etc/kubernetes",
		},
		{
			name:    "more than MaxReadSize in headers",
			archive: headerOnly(t, tar.Header{Typeflag: tar.TypeReg, Name: "kubernetes/big", Size: MaxReadSize + 1}),
			want:    "more than",
		},
		{
			name:    "an endless archive",
			archive: nil, // endless below
			want:    "more than 32 MiB",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tc.archive)
			if tc.archive == nil {
				r = endless(headerOnly(t, dirEntry("kubernetes/d/").h))
			}
			files := map[string][]byte{}
			err := readTar(r, "/etc", "/etc/kubernetes", files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v (files %q), want an error with %q", err, keys(files), tc.want)
			}
		})
	}
}

// TestReadTarBudget: the files read by earlier calls (ReadFiles reads one
// archive per file) count against MaxReadSize.
func TestReadTarBudget(t *testing.T) {
	files := map[string][]byte{"/etc/kubernetes/earlier": make([]byte, MaxReadSize-10)}
	err := readTar(bytes.NewReader(archiveOf(t, fileEntry("kubernetes/more", strings.Repeat("x", 20)))), "/etc", "/etc/kubernetes", files)
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("got %v, want the budget spent", err)
	}
}

// endless repeats block forever.
func endless(block []byte) io.Reader { return &repeater{block: block} }

type repeater struct {
	block []byte
	off   int
}

func (r *repeater) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.block[r.off:])
		n += c
		r.off = (r.off + c) % len(r.block)
	}
	return n, nil
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// FuzzReadTar feeds readTar what a node might answer to an archive
// request for /etc/kubernetes: never a file outside it, never more bytes
// of files than the archive holds (no sparse expansion), and work in
// proportion to the archive.
func FuzzReadTar(f *testing.F) {
	f.Add(nodeArchive(f))
	f.Add(archiveOf(f, fileEntry("kubernetes/../x", "x")))
	f.Add(archiveOf(f, entry{h: tar.Header{Typeflag: tar.TypeReg, Name: "kubernetes/" + strings.Repeat("long/", 40) + "f",
		Format: tar.FormatPAX, PAXRecords: map[string]string{"comment": "pax"}}, content: "pax"}))
	f.Add(archiveOf(f, entry{h: tar.Header{Typeflag: tar.TypeReg, Name: "kubernetes/" + strings.Repeat("gnu/", 40) + "f",
		Format: tar.FormatGNU}, content: "gnu"}))
	f.Add([]byte{})
	const dir = "/etc/kubernetes"
	f.Fuzz(func(t *testing.T, b []byte) {
		files := map[string][]byte{}
		var err error
		fuzzcheck.Bounded(t, len(b), func() { err = readTar(bytes.NewReader(b), "/etc", dir, files) })
		if err != nil {
			return
		}
		total := 0
		for p, c := range files {
			if p != dir && !strings.HasPrefix(p, dir+"/") {
				t.Fatalf("read a file outside %s: %s", dir, p)
			}
			total += len(c)
		}
		if total > len(b) {
			t.Fatalf("the files hold %d bytes, more than the %d-byte archive", total, len(b))
		}
	})
}
