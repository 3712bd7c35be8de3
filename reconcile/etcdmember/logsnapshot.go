package etcdmember

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rigger/rigger/reconcile/fanout"
)

// How SnapshotLogs writes and how long it may take.
const (
	// LogSnapshotKey is the key SnapshotLogs writes, outside the API
	// servers' prefix, and deletes at its end.
	LogSnapshotKey = "/rigger/log-snapshot"
	// logSnapshotBatch writes are made between two looks at the members'
	// snapshots, logSnapshotWriters at a time: few, so that the API
	// servers' reads, queued behind the writes in etcd, keep being
	// answered (with 16 at a time the API through a worker did not answer
	// for 5 to 7 s on a loaded two-core machine).
	logSnapshotBatch   = 1000
	logSnapshotWriters = 4
	// logSnapshotMaxWrites bounds the writes: ten times etcd 3.6's
	// --snapshot-count (10,000), twice 3.5's (100,000).
	logSnapshotMaxWrites = 200_000
	// logSnapshotTimeout bounds the whole.
	logSnapshotTimeout = 10 * time.Minute
	// snapshotsSaved is the counter of the snapshots a member saved to
	// its disk since it started (etcd 3.5 and 3.6).
	snapshotsSaved = "etcd_debugging_snap_save_total_duration_seconds_count"
)

// LogSnapshots is what SnapshotLogs did.
type LogSnapshots struct {
	// Members are the members of the minor version asked for that saved a
	// snapshot; Skipped those that did not answer (with why) or run
	// another version.
	Members, Skipped []string
	// Written is how many entries it wrote to make them save one.
	Written int
	Took    time.Duration
}

// SnapshotLogs makes every member that answers and runs etcd minor
// version minor ("3.6") save a snapshot of its log (etcd's own, taken
// every --snapshot-count entries it applies) at an index past every entry
// the cluster had committed when it was called, and checks each did: a
// member replays its log from its last snapshot when it starts, and etcd
// 3.7 cannot read the entries 3.5 wrote in v2's format, which a 3.6 member
// keeps in its log until its first snapshot after them.
//
// etcd has no call that takes a snapshot of the log. SnapshotLogs writes
// LogSnapshotKey, logSnapshotWriters writes at a time, until each such
// member's count of snapshots saved (its metrics on its client URL) has
// grown since it had applied every entry committed at the start, then
// deletes the key. A member snapshots once it has applied --snapshot-count
// entries past its last snapshot, so with etcd's default this is about
// 10,000 writes of a few bytes, and at most logSnapshotMaxWrites.
// Members that do not answer are skipped: they move to 3.7 only with
// their nodes, and the apply that moves them calls this again.
func (c *Client) SnapshotLogs(ctx context.Context, minor string) (out LogSnapshots, err error) {
	start := time.Now()
	defer func() { out.Took = time.Since(start) }()
	ctx, cancel := context.WithTimeout(ctx, logSnapshotTimeout)
	defer cancel()
	lctx, lcancel := context.WithTimeout(ctx, c.callTimeout)
	list, err := c.c.MemberList(lctx)
	lcancel()
	if err != nil {
		return out, fmt.Errorf("list etcd members: %w", err)
	}
	type member struct {
		name, url string
		saved     float64
	}
	var members []*member
	var committed uint64
	for _, m := range list.Members {
		name := Member{Name: m.Name, PeerURLs: m.PeerURLs}.String()
		if len(m.ClientURLs) == 0 {
			out.Skipped = append(out.Skipped, name+" (not started)")
			continue
		}
		st, err := c.statusOf(ctx, m.ClientURLs[0])
		switch {
		case err != nil:
			out.Skipped = append(out.Skipped, fmt.Sprintf("%s (does not answer: %v)", name, err))
			continue
		case !strings.HasPrefix(st.Version, minor+"."):
			out.Skipped = append(out.Skipped, fmt.Sprintf("%s (runs %s)", name, st.Version))
			continue
		}
		committed = max(committed, st.RaftIndex)
		members = append(members, &member{name: name, url: m.ClientURLs[0]})
	}
	if len(members) == 0 {
		return out, nil
	}
	// A snapshot that a member saves once it has applied every entry
	// committed now is at an index past them (it is taken between two
	// applies); its count is read after that, so that only such
	// snapshots count.
	err = fanout.Each(ctx, members, 0, func(ctx context.Context, _ int, m *member) error {
		if err := c.waitApplied(ctx, m.url, committed); err != nil {
			return fmt.Errorf("etcd member %s: %w", m.name, err)
		}
		saved, err := c.snapshotsSaved(ctx, m.url)
		if err != nil {
			return fmt.Errorf("etcd member %s: %w", m.name, err)
		}
		m.saved = saved
		return nil
	})
	if err != nil {
		return out, err
	}
	defer func() {
		if err != nil && out.Written > 0 {
			// The key is rigger's own: not left behind by a failure.
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), c.callTimeout)
			_, _ = c.c.Delete(dctx, LogSnapshotKey)
			dcancel()
		}
	}()
	pending := members
	for len(pending) > 0 {
		if out.Written >= logSnapshotMaxWrites {
			names := make([]string, len(pending))
			for i, m := range pending {
				names[i] = m.name
			}
			return out, fmt.Errorf("etcd members %s saved no snapshot of their log after %d writes: is their --snapshot-count above %d? "+
				"Lower it (services.etcd.extra_args) while they run %s, apply, then go on", strings.Join(names, ", "), out.Written, logSnapshotMaxWrites, minor)
		}
		n, err := c.writeMarkers(ctx, logSnapshotBatch)
		out.Written += n
		if err != nil {
			return out, fmt.Errorf("write %s to make the etcd members save a snapshot of their log: %w", LogSnapshotKey, err)
		}
		var still []*member
		for _, m := range pending {
			saved, err := c.snapshotsSaved(ctx, m.url)
			if err != nil {
				return out, fmt.Errorf("etcd member %s: %w", m.name, err)
			}
			if saved > m.saved {
				out.Members = append(out.Members, m.name)
			} else {
				still = append(still, m)
			}
		}
		pending = still
	}
	dctx, dcancel := context.WithTimeout(ctx, c.callTimeout)
	_, err = c.c.Delete(dctx, LogSnapshotKey)
	dcancel()
	if err != nil {
		return out, fmt.Errorf("delete %s: %w", LogSnapshotKey, err)
	}
	return out, nil
}

// statusOf asks the member at clientURL for its status, bounded by
// statusTimeout; a member that answers with errors is an error.
func (c *Client) statusOf(ctx context.Context, clientURL string) (*clientv3.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if u, err := url.Parse(clientURL); err == nil && u.Host != "" {
		conn, err := c.dial(ctx, u.Host)
		if err != nil {
			return nil, err
		}
		conn.Close()
	}
	st, err := c.c.Status(ctx, clientURL)
	switch {
	case err != nil:
		return nil, err
	case len(st.Errors) > 0:
		return nil, errors.New(strings.Join(st.Errors, "; "))
	}
	return st, nil
}

// waitApplied waits until the member at clientURL has applied index, for
// at most a minute.
func (c *Client) waitApplied(ctx context.Context, clientURL string, index uint64) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var applied uint64
	for {
		st, err := c.statusOf(ctx, clientURL)
		if err == nil && st.RaftAppliedIndex >= index {
			return nil
		}
		if err == nil {
			applied = st.RaftAppliedIndex
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("has applied entry %d of %d after a minute (%v)", applied, index, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeMarkers writes LogSnapshotKey n times, logSnapshotWriters at a
// time, and returns how many writes succeeded; the first failure stops
// the others.
func (c *Client) writeMarkers(ctx context.Context, n int) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var done, next atomic.Int64
	var wg sync.WaitGroup
	for range logSnapshotWriters {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				wctx, wcancel := context.WithTimeout(ctx, c.callTimeout)
				_, err := c.c.Put(wctx, LogSnapshotKey, "written by rigger so that every etcd member saves a snapshot of its log")
				wcancel()
				if err != nil {
					cancel(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	return int(done.Load()), context.Cause(ctx)
}

// snapshotsSaved reads how many snapshots of its log the member at
// clientURL saved since it started, from its metrics.
func (c *Client) snapshotsSaved(ctx context.Context, clientURL string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	u, err := url.Parse(clientURL)
	if err != nil {
		return 0, err
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return c.dial(ctx, addr)
		},
		DisableKeepAlives: true,
	}
	if u.Scheme == "https" && c.tls != nil {
		tr.TLSClientConfig = c.tls.Clone()
		tr.TLSClientConfig.ServerName = u.Hostname()
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.JoinPath("/metrics").String(), nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, fmt.Errorf("read its metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("read its metrics: %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, fmt.Errorf("read its metrics: %w", err)
	}
	return counter(body, snapshotsSaved)
}

// counter is the value of the metric name (without labels) in a
// Prometheus text exposition.
func counter(metrics []byte, name string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		return strconv.ParseFloat(strings.TrimSpace(v), 64)
	}
	return 0, fmt.Errorf("its metrics have no %s", name)
}
