package sshtun

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"golang.org/x/crypto/ssh"

	"github.com/rigger/rigger/transport"
)

// OpenSSH refuses a direct-streamlocal channel with the same "open failed"
// whether the socket is missing, the user may not open it, or socket
// forwarding is off. To say which, sshtun asks the node's SFTP server
// (a subsystem, not a command) for the socket's attributes. This is a
// diagnosis only: when SFTP is not available the error stays as vague as
// sshd's.

// remoteStat is what SFTP says about a path on the node.
type remoteStat struct {
	missing bool
	mode    fs.FileMode
	uid     uint32
	gid     uint32
}

// SFTP version 3 (draft-ietf-secsh-filexfer-02), the part needed to stat.
const (
	sftpInit    = 1
	sftpVersion = 2
	sftpStat    = 17
	sftpStatus  = 101
	sftpAttrs   = 105

	sftpNoSuchFile = 2

	sftpAttrSize        = 0x1
	sftpAttrUIDGID      = 0x2
	sftpAttrPermissions = 0x4
)

var errNoSFTP = errors.New("no SFTP subsystem")

// statRemote stats path on the node through the SFTP subsystem.
func statRemote(ctx context.Context, c *ssh.Client, path string) (remoteStat, error) {
	sess, err := c.NewSession()
	if err != nil {
		return remoteStat{}, err
	}
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	defer sess.Close()
	w, err := sess.StdinPipe()
	if err != nil {
		return remoteStat{}, err
	}
	r, err := sess.StdoutPipe()
	if err != nil {
		return remoteStat{}, err
	}
	if err := sess.RequestSubsystem("sftp"); err != nil {
		return remoteStat{}, errNoSFTP
	}
	return sftpStatPath(bufio.NewReader(r), w, path)
}

// sftpStatPath speaks the SFTP exchange on r and w: init, then stat.
func sftpStatPath(r io.Reader, w io.Writer, path string) (remoteStat, error) {
	if err := sftpSend(w, sftpInit, binary.BigEndian.AppendUint32(nil, 3)); err != nil {
		return remoteStat{}, err
	}
	typ, _, err := sftpRecv(r)
	if err != nil {
		return remoteStat{}, err
	}
	if typ != sftpVersion {
		return remoteStat{}, fmt.Errorf("sftp: got packet type %d, want version", typ)
	}
	const id = 1
	req := binary.BigEndian.AppendUint32(nil, id)
	req = binary.BigEndian.AppendUint32(req, uint32(len(path)))
	req = append(req, path...)
	if err := sftpSend(w, sftpStat, req); err != nil {
		return remoteStat{}, err
	}
	typ, body, err := sftpRecv(r)
	if err != nil {
		return remoteStat{}, err
	}
	if len(body) < 8 {
		return remoteStat{}, errors.New("sftp: short reply")
	}
	if got := binary.BigEndian.Uint32(body); got != id {
		return remoteStat{}, fmt.Errorf("sftp: reply to request %d, want %d", got, id)
	}
	body = body[4:]
	switch typ {
	case sftpStatus:
		if binary.BigEndian.Uint32(body) == sftpNoSuchFile {
			return remoteStat{missing: true}, nil
		}
		return remoteStat{}, fmt.Errorf("sftp: stat failed with status %d", binary.BigEndian.Uint32(body))
	case sftpAttrs:
		return parseAttrs(body)
	}
	return remoteStat{}, fmt.Errorf("sftp: got packet type %d, want attributes", typ)
}

func parseAttrs(b []byte) (remoteStat, error) {
	var st remoteStat
	next := func(n int) ([]byte, error) {
		if len(b) < n {
			return nil, errors.New("sftp: short attributes")
		}
		v := b[:n]
		b = b[n:]
		return v, nil
	}
	f, err := next(4)
	if err != nil {
		return st, err
	}
	flags := binary.BigEndian.Uint32(f)
	if flags&sftpAttrSize != 0 {
		if _, err := next(8); err != nil {
			return st, err
		}
	}
	if flags&sftpAttrUIDGID != 0 {
		v, err := next(8)
		if err != nil {
			return st, err
		}
		st.uid, st.gid = binary.BigEndian.Uint32(v), binary.BigEndian.Uint32(v[4:])
	}
	if flags&sftpAttrPermissions != 0 {
		v, err := next(4)
		if err != nil {
			return st, err
		}
		st.mode = unixMode(binary.BigEndian.Uint32(v))
	}
	return st, nil
}

// unixMode converts st_mode bits to an fs.FileMode.
func unixMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & 0o170000 {
	case 0o140000:
		mode |= fs.ModeSocket
	case 0o040000:
		mode |= fs.ModeDir
	case 0o120000:
		mode |= fs.ModeSymlink
	case 0o100000:
	default:
		mode |= fs.ModeIrregular
	}
	return mode
}

func sftpSend(w io.Writer, typ byte, payload []byte) error {
	pkt := binary.BigEndian.AppendUint32(nil, uint32(len(payload)+1))
	pkt = append(pkt, typ)
	_, err := w.Write(append(pkt, payload...))
	return err
}

func sftpRecv(r io.Reader) (byte, []byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, fmt.Errorf("sftp: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > 1<<16 {
		return 0, nil, fmt.Errorf("sftp: packet of %d bytes", n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, fmt.Errorf("sftp: %w", err)
	}
	return buf[0], buf[1:], nil
}

// refineSocketError narrows an "open failed" from sshd with what SFTP
// says about the socket.
func refineSocketError(e *transport.DockerSocketError, st remoteStat) {
	switch {
	case st.missing:
		e.Problem = transport.SocketMissing
		e.Detail = "sshd: " + e.Detail + "; SFTP: no such file"
	case st.mode&fs.ModeSocket == 0:
		e.Problem = transport.SocketNotDocker
		e.Detail = fmt.Sprintf("%s is not a socket (mode %s)", e.Path, st.mode)
	case st.mode&0o006 == 0o006 || e.User == "root":
		// The user may open it: the daemon is gone and left its socket
		// behind, or sshd does not forward sockets.
		e.Detail = fmt.Sprintf("the socket exists (%s, uid %d, gid %d) but nothing accepts connections on it, "+
			"or sshd's AllowStreamLocalForwarding is off", st.mode, st.uid, st.gid)
	default:
		e.Problem = transport.SocketPermissionDenied
		e.Detail = fmt.Sprintf("the socket exists (%s, uid %d, gid %d); %s is most likely not in group %d",
			st.mode, st.uid, st.gid, e.User, st.gid)
	}
}
