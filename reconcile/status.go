package reconcile

import (
	"context"

	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/report"
)

// What rigger tells of a cluster (package report).
type (
	Status             = report.Status
	NodeStatus         = report.NodeStatus
	ContainerStatus    = report.ContainerStatus
	KubernetesNode     = report.KubernetesNode
	EtcdStatus         = report.EtcdStatus
	AddonStatus        = report.AddonStatus
	EncryptionStatus   = report.EncryptionStatus
	Encryption         = report.Encryption
	Rotation           = report.Rotation
	PlanReport         = report.PlanReport
	KubernetesVersions = report.KubernetesVersions
)

// Status observes the cluster (a plan: the nodes, etcd and the Kubernetes
// Nodes) and says what it saw. A failure to reach the API server is part
// of the status, not an error.
func (s *Session) Status(ctx context.Context) (*Status, *Planned, error) {
	pl, err := s.Plan(ctx)
	if err != nil {
		return nil, nil, err
	}
	return BuildStatus(pl), pl, nil
}

// BuildStatus is the status of the cluster pl was computed from
// (report.BuildStatus), with its Problems.
func BuildStatus(pl *Planned) *Status {
	st := report.BuildStatus(pl.input())
	st.Problems = pl.problems()
	return st
}

// Report is the plan as rigger plan -o json writes it (report.Plan).
func (p *Planned) Report() *PlanReport { return report.Plan(p.input()) }

// problems are the warnings and failures of rigger doctor's checks that
// the plan's observation answers (doctor.Problems); nil for a teardown.
func (p *Planned) problems() []doctor.Finding {
	if p.spec == nil {
		return nil
	}
	return doctor.Problems(&doctor.Cluster{Spec: p.spec, Desired: p.Desired, Observed: p.Observed, PKI: p.PKI,
		NewPKI: p.PKISource.Kind == PKINew, IgnoreDockerVersion: p.ignoreDocker, Now: p.Observed.At})
}

// input is the plan and what it was computed from, for package report.
func (p *Planned) input() report.Input {
	return report.Input{Plan: p.Plan, Desired: p.Desired, Observed: p.Observed,
		PKI: p.PKI, PKIChanges: p.PKIChanges, PKISource: p.PKISource,
		Rotation: p.Rotation(), RotationWaiting: p.RotationWaiting(), RotationRecordCleared: p.RotationRecordCleared(),
		Encryption: p.Encryption, NodeChanges: p.NodeChanges, Addons: p.Addons, AddonHealth: p.AddonHealth,
		AddonsErr: p.AddonsErr, Warnings: p.Warnings, Changes: p.Changes(), Complete: p.Complete(), Blocked: p.Blocked()}
}
