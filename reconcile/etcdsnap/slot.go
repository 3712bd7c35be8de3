package etcdsnap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A scheduled snapshot may be taken by more than one taker: `rigger serve`
// (Scheduled, for every cluster it reconciles) and the
// etcd-rolling-snapshots container on every etcd node (RunSnapshotter).
// They never both take the same one: before taking a scheduled snapshot, a
// taker claims its slot in etcd itself, in one compare-and-swap
// transaction on the cluster's slot record (SlotKey), and only the taker
// whose transaction succeeds takes it. Every taker decides from the same
// record, so the slots are the same for all of them, whatever snapshots
// each one can list: the next slot is interval_hours after the last
// scheduled snapshot the record says was taken (decideSlot).

// SlotStore is where the takers of scheduled snapshots claim their slots:
// the cluster's own etcd (*etcdmember.Client implements it). It exists so
// that the claim rule can be tested with several takers at once.
type SlotStore interface {
	// Get returns the key's value and modification revision; nil and 0
	// when it is absent.
	Get(ctx context.Context, key string) (value []byte, rev int64, err error)
	// PutIf writes the key when its modification revision is still rev
	// (0: absent), and returns the key's new revision and whether it
	// wrote.
	PutIf(ctx context.Context, key string, rev int64, value []byte) (newRev int64, ok bool, err error)
}

// SlotKey is the etcd key of cluster's slot record. It is outside the API
// server's prefix (/registry), so no Kubernetes object can hold it.
func SlotKey(cluster string) string {
	return "/rigger.io/etcd-snapshots/" + cluster + "/scheduled-slot"
}

// States of a slot record.
const (
	// SlotClaimed: the taker is taking the slot's snapshot, until Until.
	SlotClaimed = "claimed"
	// SlotTaken: the taker took Snapshot at At; the next slot is
	// interval_hours later.
	SlotTaken = "taken"
	// SlotFailed: the taker could not take it; anyone may try again from
	// Until on (RetryAfter later).
	SlotFailed = "failed"
)

// RetryAfter is how long after a scheduled snapshot that failed the next
// attempt is made, by whichever taker: serve's schedule waits as long.
const RetryAfter = time.Minute

// claimRecheck is how soon a taker looks again at a slot another taker
// claimed: a snapshot takes seconds, and what follows it on this taker
// (retention on its node, its listing) should not wait a minute.
const claimRecheck = 15 * time.Second

// claimMargin is added to backup_config.timeout (which bounds the taking
// itself) for how long a claim holds: the listing before, the copies and
// the upload after. A taker that died holding a claim delays the slot by
// that much at most.
const claimMargin = 5 * time.Minute

// SlotRecord is the value of the slot record in etcd. It holds no secret.
type SlotRecord struct {
	State string `json:"state"`
	// Taker says who wrote it: "rigger serve", or
	// "etcd-rolling-snapshots on <node>".
	Taker string `json:"taker"`
	// Snapshot is the snapshot's name, once taken.
	Snapshot string `json:"snapshot,omitempty"`
	// At is when the state was written (the snapshot's time for SlotTaken).
	At time.Time `json:"at"`
	// Until is when a claim lapses (SlotClaimed) or a retry may begin
	// (SlotFailed).
	Until time.Time `json:"until,omitzero"`
}

// decideSlot says when the next scheduled snapshot is due, given the
// decision from the snapshots the taker lists (s, from NextSnapshot), the
// slot record (nil when there is none) and interval_hours; claim is true
// when the taker should claim the slot now. The record can only postpone
// what the listing says: a snapshot taken less than interval ago by
// another taker (which this one may not see: the etcd-rolling-snapshots
// container lists its own node and S3), a claim that holds, a failure
// less than RetryAfter ago. It does no I/O.
func decideSlot(s Schedule, rec *SlotRecord, interval time.Duration, now time.Time) (next time.Time, claim bool, reason string) {
	if !s.Enabled {
		return time.Time{}, false, s.Reason
	}
	next, reason = s.Next, s.Reason
	if rec != nil {
		var by time.Time
		var why string
		switch rec.State {
		case SlotTaken:
			by = rec.At.Add(interval)
			why = fmt.Sprintf("%s took the last scheduled snapshot, %s, at %s; the next is due at %s",
				rec.Taker, rec.Snapshot, rec.At.UTC().Format(time.RFC3339), by.UTC().Format(time.RFC3339))
		case SlotClaimed:
			by = rec.Until
			why = fmt.Sprintf("%s claimed the scheduled snapshot's slot at %s, until %s",
				rec.Taker, rec.At.UTC().Format(time.RFC3339), rec.Until.UTC().Format(time.RFC3339))
		case SlotFailed:
			by = rec.Until
			why = fmt.Sprintf("%s failed to take the scheduled snapshot at %s; it is tried again from %s",
				rec.Taker, rec.At.UTC().Format(time.RFC3339), rec.Until.UTC().Format(time.RFC3339))
		}
		if by.After(next) {
			next, reason = by, why
		}
	}
	return next, !now.Before(next), reason
}

// slotClaim is a slot this taker holds: the record's revision after its
// claim.
type slotClaim struct {
	store SlotStore
	key   string
	rev   int64
	taker string
}

// claimSlot decides whether a scheduled snapshot is due for cl (s is
// NextSnapshot's decision from cl's listing) and, when it is, claims the
// slot. It returns the decision, changed when the record postpones it or
// another taker won the claim, and the claim when this taker may take the
// snapshot (nil otherwise). Without cl.Slots the listing decides alone.
func (cl *Cluster) claimSlot(ctx context.Context, store SlotStore, s Schedule, now time.Time) (Schedule, *slotClaim, error) {
	if store == nil {
		return s, nil, nil
	}
	key := SlotKey(cl.Name)
	val, rev, err := store.Get(ctx, key)
	if err != nil {
		return s, nil, fmt.Errorf("read the schedule's slot record: %w", err)
	}
	var rec *SlotRecord
	if val != nil {
		rec = &SlotRecord{}
		if err := json.Unmarshal(val, rec); err != nil {
			// A record that does not parse is overwritten by the next
			// claim: the listing decides.
			cl.logger().Warn("the schedule's slot record does not parse; the snapshots listed decide", "key", key, "error", err)
			rec = nil
		}
	}
	next, claim, reason := decideSlot(s, rec, cl.interval(), now)
	s.Next, s.Due, s.Reason = next, claim, reason
	if !claim {
		if soon := now.Add(claimRecheck); rec != nil && rec.State == SlotClaimed && next.After(soon) {
			// Look again soon: the holder may be done (or fail) well
			// before its claim lapses.
			s.Next = soon
		}
		return s, nil, nil
	}
	b, err := json.Marshal(SlotRecord{State: SlotClaimed, Taker: cl.Taker, At: now, Until: now.Add(cl.backupTimeout() + claimMargin)})
	if err != nil {
		return s, nil, err
	}
	newRev, ok, err := store.PutIf(ctx, key, rev, b)
	if err != nil {
		return s, nil, fmt.Errorf("claim the scheduled snapshot's slot: %w", err)
	}
	if !ok {
		s.Due = false
		s.Next = now.Add(claimRecheck)
		s.Reason = "another taker claimed this scheduled snapshot's slot first: it takes it"
		return s, nil, nil
	}
	return s, &slotClaim{store: store, key: key, rev: newRev, taker: cl.Taker}, nil
}

// settle records the outcome of a claimed slot: the snapshot taken at at
// (name set), or a failure at at that anyone may retry RetryAfter later. A claim
// that lapsed and was taken over meanwhile is left to its new holder.
func (c *slotClaim) settle(ctx context.Context, name string, at time.Time) error {
	rec := SlotRecord{State: SlotTaken, Taker: c.taker, Snapshot: name, At: at}
	if name == "" {
		rec = SlotRecord{State: SlotFailed, Taker: c.taker, At: at, Until: at.Add(RetryAfter)}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, ok, err := c.store.PutIf(ctx, c.key, c.rev, b)
	if err != nil {
		return fmt.Errorf("record the scheduled snapshot's slot as %s: %w", rec.State, err)
	}
	if !ok {
		return errors.New("record the scheduled snapshot's slot: the claim lapsed and another taker holds the slot now")
	}
	return nil
}
