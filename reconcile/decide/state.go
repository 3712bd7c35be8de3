package decide

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// State is what the state directory holds that a plan is decided from:
// the records of its certificates and of the staged operations, read once
// before the nodes are observed.
type State struct {
	// PKI is the cluster's certificates; nil when the directory has none.
	PKI *pki.Set
	// Rotation is the record of certificate rotations; Old and New the
	// generations of a CA rotation under way (nil when none).
	Rotation certrotate.Record
	Old, New *pki.Set
	// Key and KeyRecord are the generated secrets encryption key (nil when
	// none) and the record of the operation on it.
	Key       *secretsenc.Config
	KeyRecord secretsenc.Record
}

// LoadState reads the state directory dir for a plan: the one function of
// this package that does I/O. Its errors are *stall.Error values: a
// damaged file stalls.
func LoadState(dir string) (*State, error) {
	st := &State{}
	var err error
	var nf *pki.NotFoundError
	if st.PKI, err = pki.Load(dir); err != nil && !errors.As(err, &nf) {
		return nil, stall.Retries(stall.Failed, err)
	}
	if st.Rotation, err = certrotate.Load(dir); err != nil {
		return nil, stall.Stalls(stall.StateDamaged, err)
	}
	if a := st.Rotation.Active; a != nil && a.Rotation.CA {
		for sub, set := range map[string]**pki.Set{certrotate.OldDir: &st.Old, certrotate.NewDir: &st.New} {
			if *set, err = pki.Load(filepath.Join(dir, sub)); err != nil {
				return nil, stall.Stalls(stall.StateDamaged, fmt.Errorf("resume the CA rotation begun %s: %w; "+
					"restore %s from a backup: the nodes may run either generation of the CA", a.IssuedAt.Format(time.RFC3339), err, sub))
			}
		}
	}
	if st.Key, err = secretsenc.Load(dir); err != nil {
		return nil, stall.State(err)
	}
	if st.KeyRecord, err = secretsenc.LoadRecord(dir); err != nil {
		return nil, stall.State(err)
	}
	return st, nil
}

// Recovers reports whether the certificates or the key cluster.yml (c)
// needs are missing from st: the nodes' files are then kept when
// observed, to recover them from.
func (st *State) Recovers(c *spec.Cluster) bool {
	return st.PKI == nil || secretsenc.NeedsContents(secretsenc.WantOf(c, "", false, time.Time{}), st.Key)
}
