package reconcile

import (
	"github.com/rigger/rigger/reconcile/addons"
	"github.com/rigger/rigger/reconcile/kubenode"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/plan"
)

// PlanReport is a plan as `rigger plan -o json` and `--out` write it:
// the steps on the nodes (plan.Plan's fields, which `apply --plan` reads
// back), and everything else the text plan shows that an apply changes.
// It holds no secret.
type PlanReport struct {
	*plan.Plan
	// Changes and Complete are Planned.Changes and Planned.Complete, which
	// rigger plan's exit codes 2 and 1 say.
	Changes  bool `json:"changes"`
	Complete bool `json:"complete"`
	// Blocked says why the plan must not be applied (Planned.Blocked).
	Blocked string `json:"blocked,omitempty"`
	// Certificates are where the PKI comes from and what is issued.
	Certificates CertificatesReport `json:"certificates"`
	// CertificateRotation is the rotation an apply carries out;
	// CertificateRotationWaiting one that waits for it to be done;
	// CertificateRotationRecordDropped says that cluster.yml no longer
	// asks for the recorded one (Planned.RotationRecordCleared).
	CertificateRotation              *Rotation     `json:"certificate_rotation,omitempty"`
	CertificateRotationWaiting       *pki.Rotation `json:"certificate_rotation_waiting,omitempty"`
	CertificateRotationRecordDropped bool          `json:"certificate_rotation_record_dropped,omitempty"`
	// SecretsEncryption is the generated key (by name) and the stages an
	// apply runs; nil when cluster.yml asks for none.
	SecretsEncryption *EncryptionReport `json:"secrets_encryption,omitempty"`
	Warnings          []string          `json:"warnings,omitempty"`
	// NodeChanges are the labels, taints and stale Nodes an apply changes.
	NodeChanges []kubenode.Pending `json:"node_changes,omitempty"`
	// Addons are what applying the add-ons changes; nil when they could
	// not be planned (AddonsError says why, when the API server answered).
	Addons      *addons.ChangeSet `json:"addons,omitempty"`
	AddonsError string            `json:"addons_error,omitempty"`
}

// CertificatesReport is where a plan's PKI comes from and the
// certificates it issues.
type CertificatesReport struct {
	PKISource
	Issue []pki.Change `json:"issue,omitempty"`
}

// EncryptionReport is the generated secrets encryption key of a plan.
type EncryptionReport struct {
	EncryptionStatus
	PKISource
	// Stages are the stages an apply runs, the operation's own first.
	Stages []string `json:"stages,omitempty"`
}

// Report is the plan as PlanReport.
func (p *Planned) Report() *PlanReport {
	r := &PlanReport{
		Plan: p.Plan, Changes: p.Changes(), Complete: p.Complete(),
		Certificates:                     CertificatesReport{PKISource: p.PKISource, Issue: p.PKIChanges},
		CertificateRotation:              p.Rotation(),
		CertificateRotationWaiting:       p.RotationWaiting(),
		CertificateRotationRecordDropped: p.RotationRecordCleared(),
		Warnings:                         p.Warnings, NodeChanges: p.NodeChanges, Addons: p.Addons,
	}
	if err := p.Blocked(); err != nil {
		r.Blocked = err.Error()
	}
	if e := p.Encryption; e != nil {
		r.SecretsEncryption = &EncryptionReport{EncryptionStatus: *encryptionStatus(e), PKISource: e.Source}
		for _, st := range e.Stages {
			r.SecretsEncryption.Stages = append(r.SecretsEncryption.Stages, string(st))
		}
	}
	if p.AddonsErr != nil {
		r.AddonsError = p.AddonsErr.Error()
	}
	return r
}
