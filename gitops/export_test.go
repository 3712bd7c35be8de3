package gitops

import "time"

// Started and Finished let the tests of gitops_test drive a Board as the
// workers do.
func (b *Board) Started(path, trigger, revision string, at time.Time) {
	b.started(path, trigger, revision, at)
}

func (b *Board) Finished(path string, rec ReconcileRecord, f *StatusFile) { b.finished(path, rec, f) }

func (b *Board) Known(path string, f *StatusFile) { b.known(path, f) }
