package etcdsnap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

func TestRequestOf(t *testing.T) {
	tests := []struct {
		name string
		r    spec.Restore
		want *RestoreRequest
	}{
		{"none", spec.Restore{}, nil},
		{"not requested", spec.Restore{SnapshotName: "s1", ID: "r1"}, nil},
		{"id defaults to the snapshot", spec.Restore{Restore: true, SnapshotName: "s1"}, &RestoreRequest{ID: "s1", SnapshotName: "s1"}},
		{"id", spec.Restore{Restore: true, SnapshotName: "s1", ID: "r1"}, &RestoreRequest{ID: "r1", SnapshotName: "s1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, requestOf(tt.r)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// fakeRestore is RestoreSnapshot as runRestoreRequest sees it: it refuses
// before its check (refuse), or calls Checked and then returns err.
type fakeRestore struct {
	refuse error
	err    error
	// calledChecked says whether Checked was called; recordedBefore
	// whether the request was recorded when the destructive part began.
	calledChecked  bool
	recordedBefore bool
	dir, id        string
}

func (f *fakeRestore) restore(_ context.Context, name string, o RestoreOptions) (*RestoreResult, error) {
	if f.refuse != nil {
		return nil, f.refuse
	}
	res := &RestoreResult{Check: &RestoreCheck{}}
	f.calledChecked = true
	if err := o.Checked(res.Check); err != nil {
		return res, err
	}
	recs, err := loadRestores(f.dir)
	f.recordedBefore = err == nil && len(recs) == 1 && recs[0].ID == f.id && recs[0].SnapshotName == name
	return res, f.err
}

func TestRunRestoreRequest(t *testing.T) {
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	restoreErr := &RestoreError{Name: "s1", Step: "restore the snapshot", Err: errors.New("etcdctl failed")}
	tests := []struct {
		name string
		fake fakeRestore
		// checked is the caller's Checked (nil: none).
		checked func(*RestoreCheck) error
		// ctxDone cancels the context before the restore.
		ctxDone bool
		// want: an error saying inErr ("" none), and the record left.
		inErr      string
		wantRecord *RestoreRecord
	}{
		{name: "success is recorded",
			wantRecord: &RestoreRecord{ID: "r1", SnapshotName: "s1", StartedAt: now, FinishedAt: now}},
		{name: "refused by the check: not recorded, tried again",
			fake:  fakeRestore{refuse: errors.New("restore snapshot s1 refused, nothing was stopped: damaged")},
			inErr: "tried again on the next apply"},
		{name: "declined at the question: not recorded",
			checked: func(*RestoreCheck) error { return errors.New("cancelled: nothing was changed") },
			inErr:   "cancelled"},
		{name: "failed after the first stop: recorded with the error, not repeated",
			fake:       fakeRestore{err: restoreErr},
			inErr:      "give restore.id a new value",
			wantRecord: &RestoreRecord{ID: "r1", SnapshotName: "s1", StartedAt: now, FinishedAt: now, Error: restoreErr.Error()}},
		{name: "ended between the record and the first stop: record dropped",
			fake:  fakeRestore{err: context.Canceled},
			inErr: "nothing was stopped"},
		{name: "context ended at the question: not recorded",
			ctxDone: true,
			inErr:   "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.ctxDone {
				cancel()
			}
			f := tt.fake
			f.dir, f.id = dir, "r1"
			req := &RestoreRequest{ID: "r1", SnapshotName: "s1"}
			_, err := runRestoreRequest(ctx, dir, req, clock, f.restore, RestoreOptions{Checked: tt.checked})
			switch {
			case tt.inErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.inErr != "" && (err == nil || !strings.Contains(err.Error(), tt.inErr)):
				t.Fatalf("error %v, want it to say %q", err, tt.inErr)
			}
			if f.calledChecked && tt.wantRecord != nil && !f.recordedBefore {
				t.Error("the request was not recorded before the destructive part began")
			}
			var re *RestoreError
			if errors.Is(tt.fake.err, restoreErr) && !errors.As(err, &re) {
				t.Errorf("the *RestoreError is not kept: %v", err)
			}
			recs, err := loadRestores(dir)
			if err != nil {
				t.Fatal(err)
			}
			var want []RestoreRecord
			if tt.wantRecord != nil {
				want = []RestoreRecord{*tt.wantRecord}
			}
			if diff := cmp.Diff(want, recs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPendingRestore: a request is pending until its id is recorded, a
// new id makes it pending again, and the record file is private.
func TestPendingRestore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	pending := func(r spec.Restore) *RestoreRequest {
		t.Helper()
		p, err := PendingRestore(dir, r)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	s1 := spec.Restore{Restore: true, SnapshotName: "s1"}
	if p := pending(spec.Restore{}); p != nil {
		t.Fatalf("no request: pending %+v", p)
	}
	if p := pending(s1); p == nil || p.ID != "s1" || p.SnapshotName != "s1" {
		t.Fatalf("pending %+v, want id s1", p)
	}
	at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	if err := putRestore(dir, RestoreRecord{ID: "s1", SnapshotName: "s1", StartedAt: at, FinishedAt: at}); err != nil {
		t.Fatal(err)
	}
	if p := pending(s1); p != nil {
		t.Fatalf("done: pending %+v", p)
	}
	req, err := RequestedRestore(dir, s1)
	if err != nil || req == nil || req.Done == nil || !req.Done.FinishedAt.Equal(at) {
		t.Fatalf("requested %+v, %v: want the record of s1", req, err)
	}
	if p := pending(spec.Restore{Restore: true, SnapshotName: "s1", ID: "again"}); p == nil || p.ID != "again" {
		t.Fatalf("a new id: pending %+v", p)
	}
	if fi, err := os.Stat(filepath.Join(dir, restoresFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("restores file: %v, %v; want mode 0600", err, fi.Mode())
	}
	// A damaged record says what to do, and nothing is pending then.
	if err := os.WriteFile(filepath.Join(dir, restoresFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = PendingRestore(dir, spec.Restore{Restore: true, SnapshotName: "s1", ID: "x"})
	var damaged *statedir.DamagedError
	if !errors.As(err, &damaged) || !strings.Contains(err.Error(), "move it away") {
		t.Errorf("damaged file: %v; want a *statedir.DamagedError that says what to do", err)
	}
}
