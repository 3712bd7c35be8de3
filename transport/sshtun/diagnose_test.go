package sshtun

import (
	"bytes"
	"encoding/binary"
	"io/fs"
	"strings"
	"testing"

	"github.com/rigger/rigger/transport"
)

// sftpReply builds the server's side of an exchange: VERSION, then reply.
func sftpReply(typ byte, body []byte) *bytes.Reader {
	var b bytes.Buffer
	sftpSend(&b, sftpVersion, binary.BigEndian.AppendUint32(nil, 3))
	sftpSend(&b, typ, append(binary.BigEndian.AppendUint32(nil, 1), body...))
	return bytes.NewReader(b.Bytes())
}

func u32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}

func TestSFTPStat(t *testing.T) {
	socketAttrs := append(u32(sftpAttrSize|sftpAttrUIDGID|sftpAttrPermissions), make([]byte, 8)...) // size 0
	socketAttrs = append(socketAttrs, u32(0, 998, 0o140660)...)
	tests := []struct {
		name  string
		reply *bytes.Reader
		want  remoteStat
	}{
		{"missing", sftpReply(sftpStatus, u32(sftpNoSuchFile, 0, 0)), remoteStat{missing: true}},
		{"socket", sftpReply(sftpAttrs, socketAttrs), remoteStat{mode: fs.ModeSocket | 0o660, uid: 0, gid: 998}},
		{"regular file, no owner", sftpReply(sftpAttrs, u32(sftpAttrPermissions, 0o100644)), remoteStat{mode: 0o644}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent bytes.Buffer
			got, err := sftpStatPath(tt.reply, &sent, "/var/run/docker.sock")
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("stat = %+v, want %+v", got, tt.want)
			}
			// What was sent: INIT v3, then STAT id 1 of the path.
			want := new(bytes.Buffer)
			sftpSend(want, sftpInit, u32(3))
			sftpSend(want, sftpStat, append(u32(1, uint32(len("/var/run/docker.sock"))), "/var/run/docker.sock"...))
			if !bytes.Equal(sent.Bytes(), want.Bytes()) {
				t.Errorf("sent %x, want %x", sent.Bytes(), want.Bytes())
			}
		})
	}
	if _, err := sftpStatPath(sftpReply(sftpStatus, u32(3, 0, 0)), &bytes.Buffer{}, "/x"); err == nil {
		t.Error("a permission-denied status was taken for attributes")
	}
	if _, err := sftpStatPath(bytes.NewReader(nil), &bytes.Buffer{}, "/x"); err == nil {
		t.Error("a silent server gave no error")
	}
}

func TestRefineSocketError(t *testing.T) {
	sock := fs.ModeSocket | 0o660
	tests := []struct {
		name   string
		user   string
		st     remoteStat
		want   transport.SocketProblem
		detail string
	}{
		{"missing", "rke", remoteStat{missing: true}, transport.SocketMissing, ""},
		{"not in group", "rke", remoteStat{mode: sock, gid: 998}, transport.SocketPermissionDenied, "not in group 998"},
		{"root, stale socket", "root", remoteStat{mode: sock, gid: 998}, transport.SocketUnavailable, "AllowStreamLocalForwarding"},
		{"open to all", "rke", remoteStat{mode: fs.ModeSocket | 0o666}, transport.SocketUnavailable, "nothing accepts"},
		{"not a socket", "rke", remoteStat{mode: 0o644}, transport.SocketNotDocker, "not a socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &transport.DockerSocketError{Node: "n1", Path: "/var/run/docker.sock", User: tt.user, Detail: "open failed"}
			refineSocketError(e, tt.st)
			if e.Problem != tt.want {
				t.Errorf("Problem = %d, want %d", e.Problem, tt.want)
			}
			if !strings.Contains(e.Error(), tt.detail) {
				t.Errorf("message %q does not say %q", e.Error(), tt.detail)
			}
		})
	}
}
