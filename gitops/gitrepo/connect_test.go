package gitrepo

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// silentListener is a loopback TCP listener that never accepts and whose
// accept queue is full: a connect to it waits, unanswered, as one to a
// host whose answers go nowhere does. It returns its address.
func silentListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	// Fill the accept queue: a connect that completes within a moment
	// took a place; the first that does not shows the queue full.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			if i == 0 {
				t.Fatalf("the first connect to the silent listener: %v", err)
			}
			return addr
		}
		t.Cleanup(func() { c.Close() })
		if i > 16 {
			t.Fatal("the listener's accept queue never filled")
		}
	}
}

// TestSSHConnectTimeout: a git server whose connect is never answered
// fails Open after Auth.SSHConnectTimeout, naming the server, instead of
// waiting for the kernel's retries (minutes).
func TestSSHConnectTimeout(t *testing.T) {
	addr := silentListener(t)
	key, _ := sshKeyFile(t)
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	auth := Auth{SSHKeyFile: key, KnownHostsFile: known, SSHConnectTimeout: time.Second}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Open(ctx, filepath.Join(t.TempDir(), "clone"), "ssh://git@"+addr+"/repo.git", auth)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open of a server that never answers: %v, want an error naming %s", err, addr)
	}
	if took > 20*time.Second {
		t.Errorf("Open gave up after %s, want about the 1s connect timeout", took)
	}
	t.Logf("after %s: %v", took.Round(time.Millisecond), err)
}
