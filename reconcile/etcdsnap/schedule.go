package etcdsnap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rigger/rigger/spec"
)

// Schedule is the decision whether a scheduled snapshot is due.
type Schedule struct {
	// Enabled is backup_config.enabled: when false nothing is ever due.
	Enabled bool
	// Due says a snapshot must be taken now.
	Due bool
	// Next is when the next scheduled snapshot is (or was) due: the last
	// successful snapshot's time plus interval_hours, or the time of the
	// decision when there is none. Zero when disabled.
	Next time.Time
	// Last is the newest successful snapshot, of any kind; nil when none.
	Last *Info
	// Reason says why, for people.
	Reason string
}

// Complete says whether the snapshot was taken successfully and is still
// usable: rigger wrote its sidecar (the last step of a save, after the
// checks) and at least one etcd node holds a copy of the sidecar's size,
// or S3 holds it. A file without a sidecar (a save that stopped half-way,
// RKE's, a file put there by hand) or only damaged copies is not.
func (si Info) Complete() bool {
	return si.Sidecar != nil && (len(si.Nodes) > 0 || si.S3 != "")
}

// AwaitsUpload says whether the snapshot is rigger's (it has a sidecar),
// on at least one etcd node, and not in S3: with s3backupconfig set, S3
// lacks it, and Scheduled uploads it (uploadMissing).
func (si Info) AwaitsUpload() bool {
	return si.Sidecar != nil && len(si.Nodes) > 0 && si.S3 == ""
}

// kind is the snapshot's kind from its sidecar; without one, KindScheduled
// for a name of RKE's scheduled snapshots (<stamp>_etcd, ParseName), which
// RKE's own retention would remove in time, and "" for any other.
func (si Info) kind() string {
	if si.Sidecar != nil {
		return si.Sidecar.Kind
	}
	if p, ok := ParseName(si.Name); ok && p.Scheduled {
		return KindScheduled
	}
	return ""
}

// NextSnapshot decides whether a scheduled snapshot is due at now under
// backup_config b (as spec.Load defaults it), given the snapshots found on
// the etcd nodes and in S3. The interval counts from the newest complete
// snapshot of any kind (Info.Complete), never from when a
// container started: a cluster with none is due at once. A nil b or
// enabled: false disables the schedule. It does no I/O.
func NextSnapshot(b *spec.BackupConfig, snaps []Info, now time.Time) Schedule {
	if b == nil {
		return Schedule{Reason: "services.etcd.backup_config is not set: no scheduled snapshots"}
	}
	if b.Enabled != nil && !*b.Enabled {
		return Schedule{Reason: "services.etcd.backup_config.enabled is false: no scheduled snapshots"}
	}
	hours := b.IntervalHours
	if hours <= 0 {
		hours = spec.DefaultEtcdIntervalHours
	}
	interval := time.Duration(hours) * time.Hour
	d := Schedule{Enabled: true}
	for i := range snaps {
		si := &snaps[i]
		if !si.Complete() {
			continue
		}
		if d.Last == nil || si.TakenAt.After(d.Last.TakenAt) || si.TakenAt.Equal(d.Last.TakenAt) && si.Name > d.Last.Name {
			d.Last = si
		}
	}
	if d.Last == nil {
		d.Due, d.Next = true, now
		d.Reason = "no complete snapshot found on the etcd nodes or in s3: one is due now"
		return d
	}
	last := d.Last.TakenAt
	d.Next = last.Add(interval)
	ago := now.Sub(last).Round(time.Second)
	switch {
	case !now.Before(d.Next):
		d.Due = true
		d.Reason = fmt.Sprintf("the last complete snapshot, %s, was taken %s ago, at %s; interval_hours is %d: one is due now",
			d.Last.Name, ago, last.UTC().Format(time.RFC3339), hours)
	case last.After(now):
		d.Reason = fmt.Sprintf("the last complete snapshot, %s, is dated %s, after now (%s): check the clock where rigger runs; the next is due at %s",
			d.Last.Name, last.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), d.Next.UTC().Format(time.RFC3339))
	default:
		d.Reason = fmt.Sprintf("the last complete snapshot, %s, was taken %s ago; interval_hours is %d: the next is due at %s, in %s",
			d.Last.Name, ago, hours, d.Next.UTC().Format(time.RFC3339), d.Next.Sub(now).Round(time.Second))
	}
	return d
}

// Retain returns the snapshots that retention removes: for scheduled
// snapshots, and separately for before-change ones, all but the newest
// retention complete ones of the kind, and the incomplete ones of the kind
// older than the oldest kept (an incomplete snapshot never takes the place
// of a complete one, and a newer one is left for people to look at).
// Manual snapshots and those without a sidecar are never removed, but for
// RKE's scheduled ones (<stamp>_etcd.zip, Info.kind): incomplete for
// rigger, they go once retention complete scheduled snapshots are newer.
// With s3 (s3backupconfig set, and snaps has what S3 holds), a snapshot
// that awaits its upload (Info.AwaitsUpload) is not removed until S3 has
// it. A retention below 1 removes nothing. Newest is by time, then name;
// the result is sorted oldest first. It does no I/O.
func Retain(snaps []Info, retention int, s3 bool) (remove []Info) {
	if retention < 1 {
		return nil
	}
	for _, kind := range []string{KindScheduled, KindBeforeChange} {
		var of []Info
		for _, si := range snaps {
			if si.kind() == kind {
				of = append(of, si)
			}
		}
		// Newest first.
		slices.SortFunc(of, func(a, b Info) int {
			return cmp.Or(b.TakenAt.Compare(a.TakenAt), strings.Compare(b.Name, a.Name))
		})
		kept := 0
		for _, si := range of {
			if kept >= retention {
				if !s3 || !si.AwaitsUpload() {
					remove = append(remove, si)
				}
				continue
			}
			if si.Complete() {
				kept++
			}
		}
	}
	slices.SortFunc(remove, func(a, b Info) int {
		return cmp.Or(a.TakenAt.Compare(b.TakenAt), strings.Compare(a.Name, b.Name))
	})
	return remove
}

// ScheduledResult is what one Scheduled call decided and did.
type ScheduledResult struct {
	// Schedule is the decision, made before any snapshot was taken.
	Schedule Schedule
	// Next is when the next scheduled snapshot is due after this call
	// (counted from the snapshot taken, if one was); zero when disabled.
	Next time.Time
	// ListErr says which etcd nodes (or S3) could not be listed; the
	// decision and retention used the rest.
	ListErr error
	// Snapshot is the snapshot taken (its sidecar has the name, time,
	// size and sha256; Copies and S3 say where it is); nil when none was.
	Snapshot *SaveResult
	// CopyErr says which etcd nodes did not get a verified copy; S3Err why
	// uploads to S3 failed, the snapshot's and those of snapshots S3
	// lacked (Uploaded), each a *UploadError. The snapshot is taken all
	// the same: it is on the other nodes.
	CopyErr error
	S3Err   error
	// Uploaded are the snapshots this call uploaded to S3 that were on
	// the etcd nodes only (an earlier upload failed, or they were taken
	// before s3backupconfig was set), oldest first; an upload that failed
	// is in S3Err.
	Uploaded []string
	// NotInS3 are this cluster's snapshots on the etcd nodes that S3 does
	// not hold after this call (Info.AwaitsUpload), oldest first; while S3
	// cannot be listed (ListErr), that is every one on the nodes, as none
	// is known to be there. Nil without s3backupconfig.
	NotInS3 []string
	// Deleted are the snapshots retention removed, oldest first;
	// RetentionErr says what could not be removed (they are tried again
	// next time). Neither makes the snapshot a failure.
	Deleted      []string
	RetentionErr error
}

// Scheduled is one tick of the snapshot schedule, for `rigger
// serve`: it lists the snapshots on the etcd nodes (and in S3 when
// s3backupconfig is set), decides with NextSnapshot at the session's
// time, takes a scheduled snapshot when one is due (Save, whose
// taking is bounded by backup_config.timeout), uploads to S3 the
// snapshots on the nodes that S3 lacks (uploadMissing), then removes what
// Retain says, from the nodes and from S3. Only snapshots of this cluster
// (their sidecar's cluster_name) are considered: an S3 folder may be
// shared. With backup_config disabled it does nothing.
//
// With s3backupconfig set, a snapshot that S3 lacks is never removed by
// retention; while S3 cannot be listed, retention removes nothing, as it
// cannot tell which snapshots S3 lacks.
//
// The error is non-nil only when a due snapshot could not be taken at all
// (then retention does not run, but what S3 lacks is still uploaded) or
// ctx ended; everything else that failed is in the result.
func Scheduled(ctx context.Context, cl *Cluster) (*ScheduledResult, error) {
	b := cl.Backup
	res := &ScheduledResult{}
	if b == nil || b.Enabled != nil && !*b.Enabled {
		res.Schedule = NextSnapshot(b, nil, cl.Now())
		return res, nil
	}
	list, err := List(ctx, cl, true)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("list snapshots: %w", err)
	}
	res.ListErr = err
	var snaps []Info
	if list != nil {
		for _, si := range list.Snapshots {
			if si.Sidecar == nil || si.Sidecar.Cluster.ClusterName == cl.Name {
				snaps = append(snaps, si)
			}
		}
	}
	now := cl.Now()
	res.Schedule = NextSnapshot(b, snaps, now)
	log := cl.logger().With("cluster", cl.Name, "phase", "scheduled snapshot")
	// A due snapshot is taken only by the taker that claims its slot.
	var claim *slotClaim
	var saveErr error
	if res.Schedule.Due && cl.Slots != nil {
		store, closeStore, err := cl.Slots(ctx)
		if err == nil {
			res.Schedule, claim, err = cl.claimSlot(ctx, store, res.Schedule, now)
			closeLater := closeStore
			defer closeLater()
		}
		if err != nil {
			res.Schedule.Due = false
			saveErr = fmt.Errorf("take the scheduled snapshot (%s): %w", res.Schedule.Reason, err)
		} else if !res.Schedule.Due {
			log.Info("scheduled snapshot not taken here", "reason", res.Schedule.Reason)
		}
	}
	s3 := cl.s3Config() != nil
	s3Listed := s3 && list != nil && list.S3Err == nil
	// The snapshots to upload are those found before this call's own,
	// whose upload Save has just tried.
	found := len(snaps)
	res.Next = res.Schedule.Next
	if res.Schedule.Due {
		log.Info("taking a scheduled snapshot", "reason", res.Schedule.Reason)
		sr, err := Save(ctx, cl, SaveOptions{Kind: KindScheduled, Progress: func(node, msg string) { log.Info(msg, "node", node) }})
		if claim != nil {
			name, at := "", cl.Now()
			if sr != nil && sr.Sidecar != nil {
				name, at = sr.Sidecar.Name, sr.Sidecar.TakenAt
			}
			if err := claim.settle(ctx, name, at); err != nil {
				log.Warn("the scheduled snapshot's slot record was not updated; the claim lapses by itself", "error", err)
			}
		}
		if sr == nil || sr.Sidecar == nil {
			saveErr = fmt.Errorf("take the scheduled snapshot (%s): %w", res.Schedule.Reason, err)
		} else {
			res.Snapshot = sr
			res.S3Err = sr.S3Err
			var copyErrs []error
			for _, c := range sr.Copies {
				if c.Err != nil {
					copyErrs = append(copyErrs, fmt.Errorf("node %s: %w", c.Node, c.Err))
				}
			}
			res.CopyErr = errors.Join(copyErrs...)
			if err != nil {
				log.Warn("scheduled snapshot taken, not everywhere", "snapshot", sr.Sidecar.Name, "error", err)
			}
			snaps = append(snaps, takenInfo(sr))
			res.Next = NextSnapshot(b, snaps, cl.Now()).Next
		}
	}
	// What S3 lacks is uploaded even when the due snapshot failed.
	if s3Listed {
		store, err := NewS3(cl.s3Config())
		if err == nil {
			res.Uploaded, err = cl.uploadMissing(ctx, store, snaps[:found])
		}
		res.S3Err = errors.Join(res.S3Err, err)
		for _, name := range res.Uploaded {
			log.Info("snapshot uploaded to s3, which lacked it", "snapshot", name)
		}
	}
	if s3 {
		res.NotInS3 = notInS3(snaps)
	}
	if saveErr != nil {
		return res, saveErr
	}
	if s3 && !s3Listed {
		log.Warn("retention skipped: s3 could not be listed, and a snapshot that s3 lacks is kept until it is uploaded", "error", res.ListErr)
		return res, nil
	}
	var errs []error
	for _, si := range Retain(snaps, b.Retention, s3) {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		// Where the listing did not find it, there is nothing to delete.
		_, err := Delete(ctx, cl, si.Name, s3 && si.S3 != "")
		if err != nil {
			errs = append(errs, fmt.Errorf("remove snapshot %s (retention %d): %w", si.Name, b.Retention, err))
			continue
		}
		res.Deleted = append(res.Deleted, si.Name)
		log.Info("snapshot removed by retention", "snapshot", si.Name, "reason", fmt.Sprintf("more than %d %s snapshots", b.Retention, si.kind()))
	}
	res.RetentionErr = errors.Join(errs...)
	return res, nil
}

// notInS3 are the names of the snapshots that await their upload
// (Info.AwaitsUpload), in the order of snaps.
func notInS3(snaps []Info) []string {
	var out []string
	for _, si := range snaps {
		if si.AwaitsUpload() {
			out = append(out, si.Name)
		}
	}
	return out
}

// takenInfo is the Info of a snapshot SaveSnapshot took, as a
// listing would find it.
func takenInfo(sr *SaveResult) Info {
	sc := sr.Sidecar
	si := Info{Name: sc.Name, Sidecar: sc, TakenAt: sc.TakenAt, Size: sc.Size, S3: sr.S3}
	for _, c := range sr.Copies {
		if c.Err == nil {
			si.Nodes = append(si.Nodes, c.Node)
		}
	}
	slices.Sort(si.Nodes)
	return si
}
