package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rigger/rigger/internal/clip"
)

// Delivery settings: a request is tried at most MaxTries times, waiting
// RetryMin, then twice as long each time (or longer when a 429 or 5xx
// answer's Retry-After asks it), and given up when the waits would pass
// RetryBudget. Each try has RequestTimeout.
const (
	MaxTries       = 5
	RetryMin       = 2 * time.Second
	RetryBudget    = 3 * time.Minute
	RequestTimeout = 15 * time.Second
	// DefaultQueue is how many requests each destination holds while it
	// sends: past it, the oldest is dropped.
	DefaultQueue = 100
)

// request is one HTTP POST to make, and what logs call it.
type request struct {
	URL    string
	Header http.Header
	Body   []byte
	// What names the request in logs: never the URL, which may hold a
	// token.
	What string
}

// outbox is one destination's queue and sender: push never blocks, and
// run sends in order, one at a time.
type outbox struct {
	host    string // scheme://host, for logs
	label   string // the metric's target label
	max     int
	log     *slog.Logger
	observe func(target, result string)
	send    func(ctx context.Context, r request) error

	mu    sync.Mutex
	items []request
	wake  chan struct{}
	// busy is set from pop to the end of the send.
	busy atomic.Bool
}

func newOutbox(host, label string, max int, log *slog.Logger, observe func(string, string), send func(context.Context, request) error) *outbox {
	return &outbox{host: host, label: label, max: max, log: log.With("target", label, "host", host), observe: observe,
		send: send, wake: make(chan struct{}, 1)}
}

// push queues r, dropping the oldest request when the queue is full.
func (o *outbox) push(r request) {
	o.mu.Lock()
	if len(o.items) >= o.max {
		dropped := o.items[0]
		o.items = o.items[1:]
		o.mu.Unlock()
		o.log.Warn("notification queue full: the oldest notification is dropped", "dropped", dropped.What, "queue", o.max)
		o.observe(o.label, "dropped")
		o.mu.Lock()
	}
	o.items = append(o.items, r)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest request, if any.
func (o *outbox) pop() (request, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.items) == 0 {
		return request{}, false
	}
	r := o.items[0]
	o.items[0] = request{}
	o.items = o.items[1:]
	o.busy.Store(true)
	return r, true
}

// queued is how many requests wait.
func (o *outbox) queued() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.items)
}

// run sends the queued requests until ctx ends; those left then are
// logged, not sent.
func (o *outbox) run(ctx context.Context) {
	for {
		if ctx.Err() != nil {
			if n := o.queued(); n > 0 {
				o.log.Warn("serve stops: queued notifications are not sent", "queued", n)
			}
			return
		}
		r, ok := o.pop()
		if !ok {
			select {
			case <-ctx.Done():
			case <-o.wake:
			}
			continue
		}
		if err := o.send(ctx, r); err != nil {
			o.observe(o.label, "failed")
			o.log.Warn("notification not sent", "what", r.What, "err", err)
		} else {
			o.observe(o.label, "sent")
			o.log.Debug("notification sent", "what", r.What)
		}
		o.busy.Store(false)
	}
}

// retryable is an error worth another try, with the wait its answer asked
// for (0: the backoff's).
type retryable struct {
	err   error
	after time.Duration
}

func (e *retryable) Error() string { return e.err.Error() }
func (e *retryable) Unwrap() error { return e.err }

// deliverer sends requests with retries.
type deliverer struct {
	client *http.Client
	now    func() time.Time
	// wait waits d or until ctx ends.
	wait func(ctx context.Context, d time.Duration) error
}

// deliver POSTs r, retrying as the delivery settings say.
func (d *deliverer) deliver(ctx context.Context, r request) error {
	backoff, waited := RetryMin, time.Duration(0)
	for try := 1; ; try++ {
		err := d.try(ctx, r)
		if err == nil {
			return nil
		}
		var re *retryable
		if !errors.As(err, &re) {
			return err
		}
		if try == MaxTries {
			return fmt.Errorf("%w (gave up after %d tries)", err, try)
		}
		w := max(backoff, re.after)
		if waited+w > RetryBudget {
			return fmt.Errorf("%w (gave up after %d tries: the next would come after %s of retries)", err, try, RetryBudget)
		}
		if err := d.wait(ctx, w); err != nil {
			return fmt.Errorf("%w (not retried: %w)", re.err, err)
		}
		waited += w
		backoff *= 2
	}
}

// try makes one attempt: nil on 2xx, a *retryable on network errors, 429
// and 5xx, another error on the rest.
func (d *deliverer) try(ctx context.Context, r request) error {
	ctx, cancel := context.WithTimeout(ctx, RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return errors.New("build the request: the URL does not parse")
	}
	if r.Header != nil {
		req.Header = r.Header.Clone()
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "rigger-serve")
	resp, err := d.client.Do(req)
	if err != nil {
		// *url.Error quotes the URL, which may hold a token.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return &retryable{err: fmt.Errorf("post: %w", err)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	err = fmt.Errorf("answered %s: %s", resp.Status, strings.TrimSpace(clip.Ellipsis(string(body), 200)))
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		return &retryable{err: err, after: retryAfter(resp.Header.Get("Retry-After"), d.now())}
	}
	return err
}

// maxRetryAfter is the longest Retry-After read, in seconds.
const maxRetryAfter = 24 * 60 * 60

// retryAfter reads a Retry-After header: seconds, or an HTTP date; 0
// when absent or unreadable.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil && s >= 0 {
		// Past a day it is past any budget: no need to count further
		// (and a huge number would overflow).
		return time.Duration(min(s, maxRetryAfter)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
