// Package certrotate keeps track, in the state directory, of the
// certificate rotations asked for: cluster.yml's rotate_certificates and
// `rigger cert rotate`. cluster.yml is applied again and again (rigger
// serve reconciles every few minutes), so its request is a one-shot: it is
// carried out once, and recorded; while cluster.yml asks for the same, no
// further rotation happens; when cluster.yml no longer asks, the record is
// dropped, so that asking again rotates again (as the restore request's
// restores.json does in package etcdsnap).
//
// A rotation is Active from the moment its certificates are issued and
// saved until every node runs them: an apply that stops half way, or
// leaves a node out, is resumed by the next one (the certificates are not
// issued again, the components that read them restart again). A CA
// rotation keeps both generations of the PKI (OldDir, NewDir) until it is
// done and goes through pki.CAStages, one apply stage each.
//
// Decide is pure; Load and Save read and write the record file.
package certrotate

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// File is the record's name in the state directory.
const File = "certrotation.json"

// The directories, in the state directory, of the two generations of the
// PKI while a CA rotation is under way.
const (
	OldDir = "ca-rotation/old"
	NewDir = "ca-rotation/new"
)

// Where a rotation was asked for.
const (
	FromClusterYML  = "cluster.yml"
	FromCommandLine = "command line"
)

// Record is what the state directory keeps.
type Record struct {
	// Requested is cluster.yml's rotate_certificates that was carried out
	// (or is being): while cluster.yml asks for the same, nothing more is
	// rotated. Nil once cluster.yml no longer asks.
	Requested *pki.Rotation `json:"requested,omitempty"`
	// Active is the rotation under way; nil when none is.
	Active *Active `json:"active,omitempty"`
}

// Active is a rotation whose certificates are issued and saved, and that
// not every node runs yet.
type Active struct {
	Rotation pki.Rotation `json:"rotation"`
	From     string       `json:"from"`
	// Names are the certificates reissued: the components that read them
	// restart at each apply until the rotation is done.
	Names    []string  `json:"names"`
	IssuedAt time.Time `json:"issued_at"`
	// Stage is the stage of a CA rotation the nodes are being moved to.
	Stage pki.CAStage `json:"stage,omitempty"`
}

// Load reads the record of the state directory dir; an empty one when
// there is none.
func Load(dir string) (Record, error) {
	var r Record
	if err := statedir.ReadJSON(dir, File, &r); err != nil {
		return Record{}, fmt.Errorf("read the certificate rotations: %w; repair it, or move it away "+
			"(a rotation of cluster.yml recorded there would then run again)", err)
	}
	if a := r.Active; a != nil && a.Rotation.CA && !slices.Contains(pki.CAStages, a.Stage) {
		return Record{}, fmt.Errorf("read the certificate rotations: %s names stage %q of a CA rotation, which rigger does not know",
			filepath.Join(dir, File), a.Stage)
	}
	return r, nil
}

// Save replaces the record atomically, mode 0600.
func Save(dir string, r Record) error {
	if err := statedir.WriteJSON(dir, File, r); err != nil {
		return fmt.Errorf("save the certificate rotations: %w", err)
	}
	return nil
}

// FromSpec is the rotation cluster.yml's rotate_certificates asks for, in
// a canonical form (services sorted and unique, none with the CA, as RKE
// then ignores them); nil when it asks for none.
func FromSpec(rc *spec.RotateCertificates) *pki.Rotation {
	if rc == nil {
		return nil
	}
	return Canonical(pki.Rotation{CA: rc.CACertificates, Services: rc.Services})
}

// Canonical is r with its services sorted and unique, and none with the
// CA.
func Canonical(r pki.Rotation) *pki.Rotation {
	if r.CA {
		return &pki.Rotation{CA: true}
	}
	s := slices.Compact(slices.Sorted(slices.Values(r.Services)))
	if len(s) == 0 {
		s = nil
	}
	return &pki.Rotation{Services: s}
}

// Decision is what a plan does about rotations.
type Decision struct {
	// Issue is a rotation to start: its certificates are issued by this
	// plan. From says who asked.
	Issue *pki.Rotation
	From  string
	// Resume is the rotation under way that this plan goes on with.
	Resume *Active
	// Ignored is a rotation asked for that waits for the one under way.
	Ignored *pki.Rotation
	// ClearRequested is set when cluster.yml no longer asks for the
	// rotation recorded: the record is dropped when the plan is applied.
	ClearRequested bool
}

// Decide is what to do, from the record and what cluster.yml (yml) and the
// command line (cli) ask for (nil: nothing): a rotation under way goes on
// first; else the command line's starts; else cluster.yml's starts unless
// it is the one recorded.
func Decide(rec Record, yml, cli *pki.Rotation) Decision {
	var d Decision
	if yml == nil && rec.Requested != nil {
		d.ClearRequested = true
	}
	if cli != nil {
		cli = Canonical(*cli)
	}
	switch {
	case rec.Active != nil:
		d.Resume = rec.Active
		active := &rec.Active.Rotation
		switch {
		case cli != nil && !Same(cli, active):
			d.Ignored = cli
		case cli == nil && yml != nil && !Same(yml, rec.Requested) && !Same(yml, active):
			d.Ignored = yml
		}
	case cli != nil:
		d.Issue, d.From = cli, FromCommandLine
	case yml != nil && !Same(yml, rec.Requested):
		d.Issue, d.From = yml, FromClusterYML
	}
	return d
}

// Same reports whether two canonical rotations are the same request.
func Same(a, b *pki.Rotation) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.CA == b.CA && slices.Equal(a.Services, b.Services)
}

// Started is the record once the certificates of d.Issue (names) are
// saved: Active from now, and cluster.yml's request recorded when it was
// cluster.yml's. A CA rotation starts at its first stage.
func (d Decision) Started(rec Record, names []string, now time.Time) Record {
	a := &Active{Rotation: *d.Issue, From: d.From, Names: names, IssuedAt: now.UTC()}
	if d.Issue.CA {
		a.Stage = pki.CAStages[0]
	}
	rec.Active = a
	if d.From == FromClusterYML {
		rec.Requested = d.Issue
	}
	return rec
}

// Advanced is the record once every node runs the active rotation's
// current stage: the next stage of a CA rotation, else no rotation under
// way. done reports whether the rotation is over.
func Advanced(rec Record) (out Record, done bool) {
	a := rec.Active
	if a == nil {
		return rec, true
	}
	if a.Rotation.CA {
		if i := slices.Index(pki.CAStages, a.Stage); i >= 0 && i+1 < len(pki.CAStages) {
			next := *a
			next.Stage = pki.CAStages[i+1]
			rec.Active = &next
			return rec, false
		}
	}
	rec.Active = nil
	return rec, true
}
