package etcdsnap

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rigger/rigger/internal/ctxwait"
)

// RecheckInterval is the longest the etcd-rolling-snapshots container
// waits between two ticks of its schedule, even when the next snapshot is
// due later: a changed configuration (its file, rewritten by an apply),
// a snapshot S3 lacks, or a slot another taker left are picked up within
// it. It is serve's default drift interval.
const RecheckInterval = 5 * time.Minute

// minWait is the shortest wait between two ticks: the loop never spins.
const minWait = 10 * time.Second

// SnapshotterOptions is what RunSnapshotter needs.
type SnapshotterOptions struct {
	// Load returns the cluster of one tick, read afresh (the
	// configuration file and the certificates of the node), and a
	// function that releases it. Its error is a configuration error, which
	// ends RunSnapshotter.
	Load func(ctx context.Context) (*Cluster, func(), error)
	// Wait waits d or until ctx ends (the tests' clock); nil waits on a
	// timer.
	Wait func(ctx context.Context, d time.Duration) error
	Now  func() time.Time
	Log  *slog.Logger
}

// ConfigError is an error of the snapshotter's configuration: RunSnapshotter
// stops with it (and the container exits non-zero, for Docker to restart
// it).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return "configuration: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// RunSnapshotter is the loop of the etcd-rolling-snapshots container: at
// each tick it loads the cluster (the node's own etcd member and snapshot
// directory, S3 when set) and runs Scheduled on it, exactly as `rigger
// serve` does, claiming the slot of each scheduled snapshot in etcd; then
// it waits until the next snapshot is due (at most RecheckInterval, at
// least minWait), or RetryAfter when the due snapshot failed. It returns
// nil when ctx ends, and an error only for a configuration error
// (*ConfigError from Load).
func RunSnapshotter(ctx context.Context, o SnapshotterOptions) error {
	wait := o.Wait
	if wait == nil {
		wait = ctxwait.Sleep
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for {
		d, err := snapshotterTick(ctx, o, log)
		if err != nil {
			return err
		}
		log.Debug("next check", "in", d.String())
		if err := wait(ctx, d); err != nil || ctx.Err() != nil {
			return nil
		}
	}
}

// snapshotterTick is one tick of RunSnapshotter: how long to wait next, or
// a configuration error.
func snapshotterTick(ctx context.Context, o SnapshotterOptions, log *slog.Logger) (time.Duration, error) {
	cl, release, err := o.Load(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		var ce *ConfigError
		if errors.As(err, &ce) {
			return 0, err
		}
		log.Error("load the snapshotter's cluster; trying again", "error", err, "in", RetryAfter.String())
		return RetryAfter, nil
	}
	defer release()
	res, err := Scheduled(ctx, cl)
	if ctx.Err() != nil {
		return 0, nil
	}
	logScheduled(log.With("cluster", cl.Name), res, err)
	if err != nil {
		return RetryAfter, nil
	}
	if res.Next.IsZero() {
		return RecheckInterval, nil
	}
	return min(max(res.Next.Sub(o.Now()), minWait), RecheckInterval), nil
}

// logScheduled logs what one Scheduled call did.
func logScheduled(log *slog.Logger, res *ScheduledResult, err error) {
	if res.ListErr != nil {
		log.Warn("some snapshots could not be listed", "error", res.ListErr)
	}
	if err != nil {
		log.Error("scheduled snapshot failed; trying again", "error", err, "in", RetryAfter.String())
	}
	if sr := res.Snapshot; sr != nil {
		log.Info("scheduled snapshot taken and verified", "snapshot", sr.Sidecar.Name, "size", sr.Sidecar.Size, "sha256", sr.Sidecar.SHA256, "s3", sr.S3)
	}
	if res.S3Err != nil {
		log.Warn("upload to s3 failed; tried again at the next check", "error", res.S3Err)
	}
	if res.RetentionErr != nil {
		log.Warn("retention could not remove every snapshot; tried again at the next check", "error", res.RetentionErr)
	}
	if res.Snapshot == nil && err == nil {
		log.Info("no scheduled snapshot due", "reason", res.Schedule.Reason, "next", res.Next.UTC().Format(time.RFC3339))
	}
}
