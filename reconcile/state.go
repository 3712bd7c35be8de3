package reconcile

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/reconcile/statedir"
	"github.com/rigger/rigger/spec"
)

// state is what the state directory holds that a plan is decided from,
// read once, before the nodes are observed.
type state struct {
	// pki is the cluster's certificates; nil when the directory has none.
	pki *pki.Set
	// rotation is the record of certificate rotations; old and new the
	// generations of a CA rotation under way (nil when none, or missing).
	rotation certrotate.Record
	old, new *pki.Set
	// key and keyRecord are the generated secrets encryption key (nil when
	// none) and the record of the operation on it.
	key       *secretsenc.Config
	keyRecord secretsenc.Record
	// recovers is set when the certificates or the key the cluster needs
	// are missing: the nodes' files are kept when observed, to recover
	// them from.
	recovers bool
	// applied is when the last apply's steps ended; zero when unknown.
	applied time.Time
}

// loadState reads the state directory for a plan. Its errors are *Error
// values: a damaged file stalls.
func (s *Session) loadState() (*state, error) {
	dir := s.opts.StateDir
	st := &state{}
	var err error
	var nf *pki.NotFoundError
	if st.pki, err = pki.Load(dir); err != nil && !errors.As(err, &nf) {
		return nil, stall.Retries(ReasonFailed, err)
	}
	if st.rotation, err = certrotate.Load(dir); err != nil {
		return nil, stall.Stalls(ReasonStateDamaged, err)
	}
	if a := st.rotation.Active; a != nil && a.Rotation.CA {
		for sub, set := range map[string]**pki.Set{certrotate.OldDir: &st.old, certrotate.NewDir: &st.new} {
			if *set, err = pki.Load(filepath.Join(dir, sub)); err != nil {
				return nil, stall.Stalls(ReasonStateDamaged, fmt.Errorf("resume the CA rotation begun %s: %w; "+
					"restore %s from a backup: the nodes may run either generation of the CA", a.IssuedAt.Format(time.RFC3339), err, sub))
			}
		}
	}
	if st.key, err = secretsenc.Load(dir); err != nil {
		return nil, stall.State(err)
	}
	if st.keyRecord, err = secretsenc.LoadRecord(dir); err != nil {
		return nil, stall.State(err)
	}
	st.recovers = st.pki == nil || secretsenc.NeedsContents(secretsenc.WantOf(s.c, dir, false, s.opts.Now()), st.key)
	var a applied
	if err := statedir.ReadJSON(dir, appliedFile, &a); err != nil {
		return nil, stall.Stalls(ReasonStateDamaged, fmt.Errorf("read when the last apply ended: %w; delete it if it is damaged (the next plan then does not say which containers started since)", err))
	}
	st.applied = a.FinishedAt
	return st, nil
}

// appliedFile, in the state directory, says when the last apply's steps
// ended: a container that started since did not start by rigger's hand
// (plan.Plan.Restarted).
const appliedFile = "applied.json"

type applied struct {
	FinishedAt time.Time `json:"finished_at"`
}

// recordApplied saves when this apply's steps ended.
func (s *Session) recordApplied() error {
	if err := statedir.WriteJSON(s.opts.StateDir, appliedFile, applied{FinishedAt: s.opts.Now().UTC()}); err != nil {
		return fmt.Errorf("save when the apply ended: %w", err)
	}
	return nil
}

// sinceApplied is how long ago the last apply ended (st.applied), zero
// when that is not known (st nil: the state directory was not read).
func (s *Session) sinceApplied(st *state) time.Duration {
	if st == nil || st.applied.IsZero() {
		return 0
	}
	return max(s.opts.Now().Sub(st.applied), 0)
}

// nodesFile, in the state directory, lists the nodes of the last apply
// with how to reach them, so that a node removed from cluster.yml can still
// be reached and cleaned. Without it (a lost state directory), removed
// nodes are left alone: never the other way round.
const nodesFile = "nodes.json"

// loadNodes reads the nodes of the last apply; none when there is no file.
func loadNodes(dir string) ([]spec.Node, error) {
	var nodes []spec.Node
	if err := statedir.ReadJSON(dir, nodesFile, &nodes); err != nil {
		return nil, fmt.Errorf("read the nodes of the last apply: %w; move it away if it is damaged (nodes removed from cluster.yml are then not cleaned)", err)
	}
	return nodes, nil
}

// FormerNodes are the nodes of the last apply, in the state directory
// stateDir, that c no longer has: a session still reaches them, to clean
// them, until an apply has.
func FormerNodes(c *spec.Cluster, stateDir string) ([]spec.Node, error) {
	last, err := loadNodes(stateDir)
	if err != nil {
		return nil, stall.State(err)
	}
	return formerNodes(c, last), nil
}

// formerNodes are the nodes of the last apply that cluster.yml no longer has.
func formerNodes(c *spec.Cluster, last []spec.Node) []spec.Node {
	var out []spec.Node
	for _, n := range last {
		if !slices.ContainsFunc(c.Nodes, func(m spec.Node) bool { return m.Address == n.Address }) {
			out = append(out, n)
		}
	}
	return out
}
