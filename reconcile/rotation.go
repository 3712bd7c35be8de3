package reconcile

import (
	"slices"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/pki"
)

// rotation is what the plan does about certificate rotation; nil when it
// was not decided (a plan of a teardown).
func (p *Planned) rotation() *certrotate.Plan {
	if p.pki == nil {
		return nil
	}
	return p.pki.Rotation
}

// Rotation is the rotation the plan carries out; nil when none.
func (p *Planned) Rotation() *Rotation {
	rot := p.rotation()
	if rot == nil || rot.Active == nil {
		return nil
	}
	a := rot.Active
	return &Rotation{Rotation: a.Rotation, From: a.From, Resumed: rot.Decision.Resume != nil, Stage: a.Stage, Names: slices.Clone(a.Names)}
}

// RotationWaiting is a rotation asked for that waits until the one under
// way is done (the next apply after it starts it); nil when none.
func (p *Planned) RotationWaiting() *pki.Rotation {
	if rot := p.rotation(); rot != nil {
		return rot.Decision.Ignored
	}
	return nil
}

// RotationRecordCleared reports whether applying the plan drops the
// record of cluster.yml's rotate_certificates, which cluster.yml no
// longer has: adding it again then rotates again.
func (p *Planned) RotationRecordCleared() bool {
	rot := p.rotation()
	return rot != nil && rot.Decision.ClearRequested
}
