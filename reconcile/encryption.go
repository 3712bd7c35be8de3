package reconcile

import (
	"time"

	"github.com/rigger/rigger/reconcile/secretsenc"
)

// Encryption is what a plan knows of the Secrets encryption key rigger
// generates (secrets_encryption_config.enabled without custom_config):
// where it comes from, the keys' names (never their secrets), and the stage
// of the operation on it that the plan carries out (secretsenc.Decide).
type Encryption struct {
	// Source is where the key comes from: the state directory, a node
	// (recovered), or new (PKINew: no controlplane node has one yet).
	Source PKISource
	// Keys are the names of the keys the API servers get, the first one
	// encrypting.
	Keys []string
	// Op is the operation in progress (or started by this apply), with the
	// stage it is at; nil when none.
	Op *secretsenc.Op
	// Stages are the stages of Op still to run, Op's own first.
	Stages []secretsenc.Stage
	// LastRotated and LastRotatedKey are the end of the last rotation
	// and the key it brought.
	LastRotated    time.Time
	LastRotatedKey string
}

// encryptionOf is what people are shown of p; nil when p is.
func encryptionOf(p *secretsenc.Plan, stateDir string) *Encryption {
	if p == nil {
		return nil
	}
	e := &Encryption{Source: PKISource{Kind: PKIKind(p.Source), From: p.From}, Keys: p.Want.Names(),
		Op: p.Record.Op, Stages: p.Stages(), LastRotated: p.Record.LastRotated, LastRotatedKey: p.Record.LastRotatedKey}
	if p.Source == secretsenc.SourceState {
		e.Source.From = stateDir
	}
	return e
}
