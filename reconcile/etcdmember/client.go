package etcdmember

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Dialer dials an etcd member's address from wherever it is reachable (a
// node of the cluster, through the transport).
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// Timeouts of the client.
const (
	callTimeout = 10 * time.Second
	// promoteTimeout bounds the wait for a learner to catch up with the
	// leader's log before it can vote.
	promoteTimeout = 3 * time.Minute
)

// Client talks to the etcd cluster: reads through any member, membership
// changes through the members the caller names (Via).
type Client struct {
	c    *clientv3.Client
	tls  *tls.Config
	dial Dialer
	// callTimeout bounds one attempt at a membership change.
	callTimeout time.Duration
}

// Dial connects to the cluster through the endpoints (https://host:2379),
// each reached with dial, authenticated with tlsConfig (a client
// certificate the members trust).
func Dial(ctx context.Context, endpoints []string, tlsConfig *tls.Config, dial Dialer) (*Client, error) {
	c, err := connect(ctx, endpoints, tlsConfig, dial)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd: %w", err)
	}
	return &Client{c: c, tls: tlsConfig, dial: dial, callTimeout: callTimeout}, nil
}

// connect is an etcd client of the endpoints.
func connect(ctx context.Context, endpoints []string, tlsConfig *tls.Config, dial Dialer) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsConfig,
		DialTimeout: callTimeout,
		Context:     ctx,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, addr)
		})},
	})
}

// Close closes the connections.
func (c *Client) Close() error { return c.c.Close() }

// KV reads and writes the cluster's keys.
func (c *Client) KV() clientv3.KV { return c.c }

// Members lists the members, each with its health: whether it answers a
// status request on its first client URL. The members are asked at once,
// each for at most statusTimeout; one whose address cannot be dialed (its
// node does not answer) is reported so at once, with the dial's error:
// etcd's client would wait for a connection until the timeout.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.c.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list etcd members: %w", err)
	}
	out := make([]Member, len(resp.Members))
	var wg sync.WaitGroup
	for i, m := range resp.Members {
		out[i] = Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
		if len(m.ClientURLs) == 0 {
			out[i].Error = "not started"
			continue
		}
		mem := &out[i]
		wg.Go(func() {
			if applied, err := c.status(ctx, mem.ClientURLs[0]); err != nil {
				mem.Error = err.Error()
			} else {
				mem.Healthy, mem.Applied = true, applied
			}
		})
	}
	wg.Wait()
	return out, nil
}

// statusTimeout bounds the status request of one member.
const statusTimeout = 5 * time.Second

// status asks the member at clientURL for its status (statusOf): its
// raft applied index when it answers without errors.
func (c *Client) status(ctx context.Context, clientURL string) (uint64, error) {
	st, err := c.statusOf(ctx, clientURL)
	if err != nil {
		return 0, err
	}
	return st.RaftAppliedIndex, nil
}

// AddLearner adds a member that does not vote yet, through the members at
// via (Via), and returns it. etcd refuses a change while its leader has
// not been in touch with every voter for a few seconds (right after a
// promotion, say): that is waited out.
func (c *Client) AddLearner(ctx context.Context, via []string, peerURL string) (Member, error) {
	var added *etcdserverpb.Member
	err := c.change(ctx, via, changeTimeout, isUnhealthy, func(ctx context.Context, cl clientv3.Cluster) error {
		resp, err := cl.MemberAddAsLearner(ctx, []string{peerURL})
		if errors.Is(err, rpctypes.ErrPeerURLExist) {
			// An attempt that seemed to fail went through.
			list, lerr := cl.MemberList(ctx)
			if lerr != nil {
				return lerr
			}
			i := slices.IndexFunc(list.Members, func(m *etcdserverpb.Member) bool { return slices.Contains(m.PeerURLs, peerURL) })
			if i < 0 || !list.Members[i].IsLearner {
				return err
			}
			added = list.Members[i]
			return nil
		}
		if err == nil {
			added = resp.Member
		}
		return err
	})
	if err != nil {
		return Member{}, fmt.Errorf("add etcd learner %s: %w", peerURL, err)
	}
	return Member{ID: added.ID, PeerURLs: added.PeerURLs, IsLearner: true}, nil
}

// Promote makes a learner a voting member once it has caught up with the
// leader, through the members at via (Via), retrying until then or
// promoteTimeout.
func (c *Client) Promote(ctx context.Context, via []string, id uint64) error {
	err := c.change(ctx, via, promoteTimeout, func(err error) bool {
		return errors.Is(err, errLearnerNotReady) || isUnhealthy(err)
	}, func(ctx context.Context, cl clientv3.Cluster) error {
		_, err := cl.MemberPromote(ctx, id)
		if errors.Is(err, rpctypes.ErrMemberNotLearner) {
			return nil // promoted already
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("promote etcd member %x: %w", id, err)
	}
	return nil
}

// Remove removes a member through the members at via (Via: not the member
// itself), waiting out etcd's refusals while its leader is not in touch
// with every voter.
func (c *Client) Remove(ctx context.Context, via []string, id uint64) error {
	err := c.change(ctx, via, changeTimeout, isUnhealthy, func(ctx context.Context, cl clientv3.Cluster) error {
		_, err := cl.MemberRemove(ctx, id)
		if errors.Is(err, rpctypes.ErrMemberNotFound) {
			return nil // removed already
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("remove etcd member %x: %w", id, err)
	}
	return nil
}

// change makes a membership change with f through one member of via at a
// time, the first first: a member that answers that it stopped (it was
// removed, or restarts), that does not answer in time or cannot be reached
// (movesOn) passes the change to the next one, and so do the refusals
// again accepts; with a pause between two attempts, until timeout.
func (c *Client) change(ctx context.Context, via []string, timeout time.Duration, again func(error) bool, f func(context.Context, clientv3.Cluster) error) error {
	if len(via) == 0 {
		return errors.New("no healthy voting member to send the change to")
	}
	next := 0
	return retry(ctx, timeout, c.callTimeout, func(err error) bool {
		next++
		return movesOn(err) || again(err)
	}, func(ctx context.Context) error {
		cl, err := connect(ctx, []string{via[next%len(via)]}, c.tls, c.dial)
		if err != nil {
			return err
		}
		defer cl.Close()
		return f(ctx, cl.Cluster)
	})
}

// movesOn reports whether err says that the member asked did not make the
// change now, and another one may: it stopped, has no leader, timed out, or
// could not be reached. Every change is safe to send again: a removal or
// promotion found done, an addition found made (AddLearner).
func movesOn(err error) bool {
	code := status.Code(err)
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		code = etcdErr.Code()
	}
	return code == codes.Unavailable || code == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded)
}

// errLearnerNotReady is etcd's answer to a promotion of a learner that has
// not caught up yet (the client package has no value for it).
var errLearnerNotReady = rpctypes.Error(rpctypes.ErrGRPCLearnerNotReady)

// changeTimeout bounds the wait for etcd to accept a membership change.
const changeTimeout = time.Minute

func isUnhealthy(err error) bool { return errors.Is(err, rpctypes.ErrUnhealthy) }

// retry calls f, each call bounded by call, until it succeeds, fails in a
// way again does not accept, or timeout passes.
func retry(ctx context.Context, timeout, call time.Duration, again func(error) bool, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var err error
	delay := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}.DelayFunc()
	if werr := delay.Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		cctx, ccancel := context.WithTimeout(ctx, call)
		defer ccancel()
		if err = f(cctx); err != nil && again(err) {
			return false, nil
		}
		return true, err
	}); werr != nil && ctx.Err() != nil {
		return fmt.Errorf("still refused after %s: %w", timeout, err)
	}
	return err
}

// Get reads key: its value and modification revision, or nil and 0 when
// it is absent. It is bounded by the client's call timeout.
func (c *Client) Get(ctx context.Context, key string) (value []byte, rev int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	resp, err := c.c.Get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("read etcd key %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, nil
}

// PutIf writes value at key in one transaction when the key's
// modification revision is still rev (0: the key does not exist), and
// reports whether it did, with the key's new revision: false means another
// writer changed the key since it was read. It is bounded by the client's
// call timeout.
func (c *Client) PutIf(ctx context.Context, key string, rev int64, value []byte) (newRev int64, ok bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	resp, err := c.c.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, string(value))).
		Commit()
	if err != nil {
		return 0, false, fmt.Errorf("write etcd key %s: %w", key, err)
	}
	return resp.Header.GetRevision(), resp.Succeeded, nil
}
