package etcdsnap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// restoresFile, in the state directory, records the restore requests of
// cluster.yml (`restore:`) that were carried out, so that each request id
// is restored once, however often cluster.yml is applied.
const restoresFile = "restores.json"

// RestoreRequest is the restore cluster.yml asks for: `restore: {restore:
// true, snapshot_name: …, id: …}`.
type RestoreRequest struct {
	// ID is restore.id, else the snapshot name.
	ID           string
	SnapshotName string
	// Done is the record of this id when it was carried out already
	// (successfully or not); nil when it is pending.
	Done *RestoreRecord
}

// RestoreRecord is one request id carried out, as restores.json keeps it.
type RestoreRecord struct {
	ID           string `json:"id"`
	SnapshotName string `json:"snapshot_name"`
	// StartedAt is when the destructive part began (the check had passed).
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is when the restore ended; zero when rigger stopped
	// during it (the record is written before anything is stopped).
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Error is why the restore failed; "" when it succeeded.
	Error string `json:"error,omitempty"`
}

// requestOf is the restore request of r; nil when none.
func requestOf(r spec.Restore) *RestoreRequest {
	if !r.Restore || r.SnapshotName == "" {
		return nil
	}
	id := r.ID
	if id == "" {
		id = r.SnapshotName
	}
	return &RestoreRequest{ID: id, SnapshotName: r.SnapshotName}
}

// loadRestores reads the restores done; none when there is no file.
func loadRestores(dir string) ([]RestoreRecord, error) {
	var recs []RestoreRecord
	if err := statedir.ReadJSON(dir, restoresFile, &recs); err != nil {
		return nil, fmt.Errorf("read the restores done: %w; repair it, or move it away if no restore request of cluster.yml "+
			"must be kept from running again", err)
	}
	return recs, nil
}

// saveRestores replaces the restores file atomically, mode 0600.
func saveRestores(dir string, recs []RestoreRecord) error {
	if err := statedir.WriteJSON(dir, restoresFile, recs); err != nil {
		return fmt.Errorf("save the restores done: %w", err)
	}
	return nil
}

// putRestore adds or replaces the record of rec.ID.
func putRestore(dir string, rec RestoreRecord) error {
	recs, err := loadRestores(dir)
	if err != nil {
		return err
	}
	recs = slices.DeleteFunc(recs, func(r RestoreRecord) bool { return r.ID == rec.ID })
	return saveRestores(dir, append(recs, rec))
}

// dropRestore removes the record of id.
func dropRestore(dir, id string) error {
	recs, err := loadRestores(dir)
	if err != nil {
		return err
	}
	return saveRestores(dir, slices.DeleteFunc(recs, func(r RestoreRecord) bool { return r.ID == id }))
}

// RequestedRestore is the restore r (cluster.yml's restore:) requests, with
// the record of its id when it was carried out already; nil when r
// requests none. It reads the state directory dir only.
func RequestedRestore(dir string, r spec.Restore) (*RestoreRequest, error) {
	req := requestOf(r)
	if req == nil {
		return nil, nil
	}
	recs, err := loadRestores(dir)
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(recs, func(r RestoreRecord) bool { return r.ID == req.ID }); i >= 0 {
		req.Done = &recs[i]
	}
	return req, nil
}

// PendingRestore is the restore r requests when its id was not carried out
// yet; nil when there is none, or it was done.
func PendingRestore(dir string, r spec.Restore) (*RestoreRequest, error) {
	req, err := RequestedRestore(dir, r)
	if err != nil || req == nil || req.Done != nil {
		return nil, err
	}
	return req, nil
}

// RunRestoreRequest carries out req (PendingRestore) with Restore and keeps
// its record in the state directory dir.
//
// The id is recorded once the check has passed and o.Checked agreed,
// before anything is stopped, and the record is completed with the
// outcome: a restore that fails after that is not tried again (the error
// says how to go on), and one interrupted midway is not repeated either. A
// refusal before anything stopped (the check failed, Checked said no) is
// not recorded: the next apply tries again and reports it again.
func RunRestoreRequest(ctx context.Context, cl *Cluster, dir string, req *RestoreRequest, o RestoreOptions) (*RestoreResult, error) {
	restore := func(ctx context.Context, name string, o RestoreOptions) (*RestoreResult, error) {
		return Restore(ctx, cl, name, o)
	}
	return runRestoreRequest(ctx, dir, req, cl.Now, restore, o)
}

// restoreFunc is Restore: the seam runRestoreRequest is tested
// through.
type restoreFunc func(ctx context.Context, name string, o RestoreOptions) (*RestoreResult, error)

// runRestoreRequest runs restore for req and keeps its record in dir.
func runRestoreRequest(ctx context.Context, dir string, req *RestoreRequest, now func() time.Time, restore restoreFunc, o RestoreOptions) (*RestoreResult, error) {
	recorded := false
	checked := o.Checked
	o.Checked = func(chk *RestoreCheck) error {
		if checked != nil {
			if err := checked(chk); err != nil {
				return err
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rec := RestoreRecord{ID: req.ID, SnapshotName: req.SnapshotName, StartedAt: now().UTC()}
		if err := putRestore(dir, rec); err != nil {
			return fmt.Errorf("record restore request %s before the restore, nothing was stopped: %w", req.ID, err)
		}
		recorded = true
		return nil
	}
	res, err := restore(ctx, req.SnapshotName, o)
	var re *RestoreError
	switch {
	case !recorded:
		if err != nil {
			return res, fmt.Errorf("restore request %s (snapshot %s), not recorded, tried again on the next apply: %w", req.ID, req.SnapshotName, err)
		}
		// A restore that succeeded without its check being agreed to:
		// not Restore's contract.
		return res, fmt.Errorf("restore request %s (snapshot %s): the restore ended without its check", req.ID, req.SnapshotName)
	case err != nil && !errors.As(err, &re):
		// Ended between the record and the first stop: nothing changed.
		if derr := dropRestore(dir, req.ID); derr != nil {
			err = errors.Join(err, fmt.Errorf("restore request %s stays recorded as done although nothing was stopped: %w; "+
				"change restore.id in cluster.yml to request it again", req.ID, derr))
		}
		return res, fmt.Errorf("restore request %s (snapshot %s), nothing was stopped: %w", req.ID, req.SnapshotName, err)
	}
	rec := RestoreRecord{ID: req.ID, SnapshotName: req.SnapshotName, FinishedAt: now().UTC()}
	if recs, lerr := loadRestores(dir); lerr == nil {
		if i := slices.IndexFunc(recs, func(r RestoreRecord) bool { return r.ID == req.ID }); i >= 0 {
			rec.StartedAt = recs[i].StartedAt
		}
	}
	if err != nil {
		rec.Error = err.Error()
	}
	if serr := putRestore(dir, rec); serr != nil {
		// The first record stays: the request is not repeated either way.
		serr = fmt.Errorf("complete the record of restore request %s: %w", req.ID, serr)
		if err == nil {
			return res, serr
		}
		err = errors.Join(err, serr)
	}
	if err != nil {
		return res, fmt.Errorf("restore request %s (snapshot %s) failed and is recorded, it is not tried again by apply: %w\n"+
			"Once the cause is fixed, give restore.id a new value in cluster.yml to request the restore again, or follow the steps above",
			req.ID, req.SnapshotName, err)
	}
	return res, nil
}
