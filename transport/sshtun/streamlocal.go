package sshtun

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"golang.org/x/crypto/ssh"
)

// stderrBuffer is the buffer that drains a socket channel's extended data
// (which sshd never sends on one).
const stderrBuffer = 256

// dialStreamLocal opens a direct-streamlocal@openssh.com channel to the
// node's socket path, as ssh.Client.DialContext does, but drains the
// channel's extended data through a small buffer: x/crypto's goroutine
// holds an 8 KiB one for the channel's life, and the Docker client keeps
// its channels open for reuse, a few per node (a thousand nodes' plan
// held 20 MB in them).
func dialStreamLocal(ctx context.Context, c *ssh.Client, path string) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type opened struct {
		ch  ssh.Channel
		err error
	}
	done := make(chan opened, 1)
	go func() {
		msg := struct {
			Path      string
			Reserved0 string
			Reserved1 uint32
		}{Path: path}
		ch, reqs, err := c.OpenChannel("direct-streamlocal@openssh.com", ssh.Marshal(&msg))
		if err == nil {
			go ssh.DiscardRequests(reqs)
			// Hidden behind a plain Writer, io.Discard's ReadFrom (and
			// its pooled 8 KiB buffer) is not used.
			go io.CopyBuffer(struct{ io.Writer }{io.Discard}, ch.Stderr(), make([]byte, stderrBuffer))
		}
		done <- opened{ch, err}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			return nil, o.err
		}
		return &streamLocalConn{Channel: o.ch, path: path}, nil
	case <-ctx.Done():
		go func() {
			if o := <-done; o.ch != nil {
				o.ch.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// streamLocalConn is a socket channel as a net.Conn; like x/crypto's, it
// has no deadlines.
type streamLocalConn struct {
	ssh.Channel
	path string
}

var _ net.Conn = (*streamLocalConn)(nil)

var errNoDeadline = errors.New("ssh: socket channel: deadline not supported")

func (c *streamLocalConn) LocalAddr() net.Addr  { return &net.UnixAddr{Name: "@", Net: "unix"} }
func (c *streamLocalConn) RemoteAddr() net.Addr { return &net.UnixAddr{Name: c.path, Net: "unix"} }

func (c *streamLocalConn) SetDeadline(time.Time) error      { return errNoDeadline }
func (c *streamLocalConn) SetReadDeadline(time.Time) error  { return errNoDeadline }
func (c *streamLocalConn) SetWriteDeadline(time.Time) error { return errNoDeadline }
