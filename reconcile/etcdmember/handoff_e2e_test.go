package etcdmember_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rigger/rigger/internal/testwait"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/sandbox"
	"github.com/rigger/rigger/sandbox/sandboxtest"
)

// TestHandOffRealEtcd runs three members of RKE's etcd (the sandbox's
// build) on 127.0.0.1: HandOff of a follower moves nothing; of the leader,
// it makes another voter lead.
func TestHandOffRealEtcd(t *testing.T) {
	if !sandboxtest.Enabled() {
		t.Skipf("%s is not set: no etcd build to run", sandboxtest.EnvVar)
	}
	bin := etcdBinary(t, sandbox.EtcdVersion)
	peers, clients := make([]string, 3), make([]string, 3)
	var initial []string
	for i := range 3 {
		peers[i], clients[i] = "http://"+freeAddr(t), "http://"+freeAddr(t)
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	dir := t.TempDir()
	for i := range 3 {
		log, err := os.Create(filepath.Join(dir, fmt.Sprintf("m%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, fmt.Sprintf("--name=m%d", i), "--data-dir="+filepath.Join(dir, fmt.Sprintf("m%d", i)),
			"--listen-client-urls="+clients[i], "--advertise-client-urls="+clients[i],
			"--listen-peer-urls="+peers[i], "--initial-advertise-peer-urls="+peers[i],
			"--initial-cluster="+strings.Join(initial, ","), "--initial-cluster-state=new")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		log.Close()
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var d net.Dialer
	c, err := etcdmember.Dial(ctx, clients, nil, func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := clientv3.New(clientv3.Config{Endpoints: clients, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// leader is the leader's index once every member answers and agrees.
	leader := func(ctx context.Context) (int, error) {
		var ids []uint64
		for _, u := range clients {
			st, err := raw.Status(ctx, u)
			if err != nil {
				return -1, err
			}
			if st.Leader == 0 || len(ids) > 0 && st.Leader != ids[0] {
				return -1, fmt.Errorf("no leader agreed on yet")
			}
			ids = append(ids, st.Leader)
		}
		for i, u := range clients {
			st, _ := raw.Status(ctx, u)
			if st.Header.MemberId == ids[0] {
				return i, nil
			}
		}
		return -1, fmt.Errorf("the leader %x is none of the members", ids[0])
	}
	var first int
	testwait.ForContext(ctx, t, time.Minute, "three members agreeing on a leader", func(ctx context.Context) (err error) {
		first, err = leader(ctx)
		return err
	})
	for i := range 3 {
		if i == first {
			continue
		}
		if to, err := c.HandOff(ctx, peers[i]); err != nil || to != nil {
			t.Errorf("HandOff of follower m%d: %v, %v; want nothing moved", i, to, err)
		}
	}
	to, err := c.HandOff(ctx, peers[first])
	if err != nil || to == nil || to.Name == fmt.Sprintf("m%d", first) {
		t.Fatalf("HandOff of the leader m%d: %v, %v; want another member", first, to, err)
	}
	testwait.ForContext(ctx, t, 30*time.Second, to.Name+" leading", func(ctx context.Context) error {
		now, err := leader(ctx)
		if err != nil {
			return err
		}
		if got := fmt.Sprintf("m%d", now); got != to.Name {
			return fmt.Errorf("m%d leads", now)
		}
		return nil
	})
}

// freeAddr is a free port of 127.0.0.1, host:port.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
