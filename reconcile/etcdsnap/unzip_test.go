package etcdsnap

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
	"time"
)

// fakeSnapshot is size-32 bytes (a multiple of 512) and etcd's integrity
// hash of them, as etcdctl snapshot save leaves a file.
func fakeSnapshot(blocks int) []byte {
	data := bytes.Repeat([]byte("rigger snapshot "), blocks*512/16)
	sum := sha256.Sum256(data)
	return append(data, sum[:]...)
}

// zipEntry is one file of a zip made by zipOf.
type zipEntry struct {
	name string
	data []byte
}

// zipOf zips the entries as rke-tools' compressFiles does: deflated, with
// the modification time at the Unix epoch.
func zipOf(t *testing.T, entries ...zipEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: time.Unix(0, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// lyingZip holds one entry whose header says it unpacks to declared bytes
// and whose deflated data unpacks to data.
func lyingZip(t *testing.T, name string, data []byte, declared uint64) []byte {
	return rawZip(t, name, data, declared, crc32.ChecksumIEEE(data[:min(uint64(len(data)), declared)]))
}

// rawZip holds one entry of data, deflated, with the header's declared
// size and CRC-32 as given.
func rawZip(t *testing.T, name string, data []byte, declared uint64, crc uint32) []byte {
	t.Helper()
	var comp bytes.Buffer
	fw, _ := flate.NewWriter(&comp, flate.BestCompression)
	fw.Write(data)
	fw.Close()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.CreateRaw(&zip.FileHeader{Name: name, Method: zip.Deflate, CRC32: crc,
		CompressedSize64: uint64(comp.Len()), UncompressedSize64: declared})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(comp.Bytes())
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUnzipSnapshot(t *testing.T) {
	const name = "before-rigger"
	snap := fakeSnapshot(4)
	sum := sha256.Sum256(snap)
	damaged := bytes.Clone(snap)
	damaged[100] ^= 0xff
	state := zipEntry{"/etc/kubernetes/" + name + ".rkestate", []byte(`{"desiredState":{}}`)}
	good := zipOf(t, zipEntry{"/backup/" + name, snap}, state)
	badCRC := rawZip(t, "/backup/"+name, snap, uint64(len(snap)), crc32.ChecksumIEEE(snap)^1)
	zeros := append(bytes.Clone(snap), make([]byte, 1<<20)...)

	tests := []struct {
		name  string
		zip   []byte
		limit int64
		err   string // a part of the *zipError; "" for none
	}{
		{name: "rke-tools' zip, with RKE's cluster state", zip: good},
		{name: "rke-tools' zip of a rolling snapshot", zip: zipOf(t, zipEntry{"/backup/" + name, snap})},
		{name: "Info-ZIP's zip of /backup/NAME", zip: zipOf(t, zipEntry{"backup/" + name, snap})},
		{name: "zipped from its own directory", zip: zipOf(t, zipEntry{name, snap})},
		{name: "wrong entry", zip: zipOf(t, zipEntry{"/backup/other", snap}),
			err: `the zip file holds "/backup/other", which is neither the snapshot (/backup/before-rigger, backup/before-rigger, before-rigger) nor RKE's cluster state`},
		{name: "no entry", zip: zipOf(t), err: "the zip file holds no snapshot named before-rigger"},
		{name: "two entries of the snapshot", zip: zipOf(t, zipEntry{"/backup/" + name, snap}, zipEntry{"backup/" + name, snap}),
			err: `the zip file holds the snapshot twice ("/backup/before-rigger" and "backup/before-rigger")`},
		{name: "the snapshot and something else", zip: zipOf(t, zipEntry{"/backup/" + name, snap}, zipEntry{"/backup/notes.txt", []byte("x")}),
			err: `the zip file holds "/backup/notes.txt"`},
		{name: "a directory entry", zip: zipOf(t, zipEntry{"backup/", nil}, zipEntry{"backup/" + name, snap}), err: `the zip file holds "backup/"`},
		{name: "truncated", zip: good[:len(good)/2], err: "it is not a zip file that can be read (truncated?)"},
		{name: "its CRC-32 wrong", zip: badCRC, err: `its entry "/backup/before-rigger" is damaged`},
		{name: "its CRC-32 wrong, exactly at the limit", zip: badCRC, limit: int64(len(snap)), err: `its entry "/backup/before-rigger" is damaged`},
		{name: "exactly at the limit", zip: good, limit: int64(len(snap))},
		{name: "the snapshot in it damaged", zip: zipOf(t, zipEntry{"/backup/" + name, damaged}),
			err: `what its entry "/backup/before-rigger" unpacks to fails etcd's integrity check: etcd's integrity hash at its end is`},
		{name: "bomb: says it unpacks past the limit", zip: zipOf(t, zipEntry{"/backup/" + name, snap}), limit: 1024,
			err: `its entry "/backup/before-rigger" says it unpacks to 2080 bytes, more than rigger unzips (1024)`},
		{name: "bomb: unpacks past what it says", zip: lyingZip(t, "/backup/"+name, zeros, uint64(len(snap))),
			err: `its entry "/backup/before-rigger" is damaged`},
		{name: "bomb: says less than it is, past the limit", zip: lyingZip(t, "/backup/"+name, zeros, uint64(len(zeros))), limit: 64 << 10,
			err: "more than rigger unzips (65536)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit := tt.limit
			if limit == 0 {
				limit = MaxUnzippedSize
			}
			var out bytes.Buffer
			n, got, err := unzipSnapshot(bytes.NewReader(tt.zip), int64(len(tt.zip)), name, limit, &out)
			if tt.err != "" {
				var ie *integrityError
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.As(err, &ie) {
					t.Fatalf("error %v, want a *zipError with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(snap)) || got != hex.EncodeToString(sum[:]) || !bytes.Equal(out.Bytes(), snap) {
				t.Errorf("unzipped %d bytes, sha256 %s (%d written), want %d bytes, sha256 %x", n, got, out.Len(), len(snap), sum)
			}
		})
	}
}

// An error writing the snapshot is returned as it is, not as a damaged zip.
func TestUnzipSnapshotWriteError(t *testing.T) {
	z := zipOf(t, zipEntry{"/backup/s", fakeSnapshot(2)})
	_, _, err := unzipSnapshot(bytes.NewReader(z), int64(len(z)), "s", MaxUnzippedSize, failWriter{})
	var ie *integrityError
	if err == nil || errors.As(err, &ie) || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("write error: %v, want the writer's, not a *zipError", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
