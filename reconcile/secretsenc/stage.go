package secretsenc

import (
	"fmt"
	"slices"
	"time"

	"github.com/rigger/rigger/reconcile/statedir"
)

// recordFile, in the state directory, records the operation on the key in
// progress and whether cluster.yml's rotate_encryption_key request was
// carried out.
const recordFile = "encryption-record.json"

// Kind is an operation on the cluster's encryption.
type Kind string

const (
	// KindRotate replaces the key by a new one (rotate_encryption_key).
	KindRotate Kind = "rotate"
	// KindEncrypt rewrites every Secret once encryption is on, so that
	// those written before are encrypted too (RKE does so).
	KindEncrypt Kind = "encrypt"
)

// Stage is one step of an operation.
type Stage string

const (
	// StageAddKey: the new key is the second key, decrypt-only, on every
	// API server.
	StageAddKey Stage = "add-key"
	// StageWriteKey: the new key is the first key, the one every API server
	// encrypts with.
	StageWriteKey Stage = "write-new-key"
	// StageRewrite: every Secret is rewritten, encrypted with the first key.
	StageRewrite Stage = "rewrite-secrets"
	// StageDropOld: only the new key is left on every API server.
	StageDropOld Stage = "drop-old-keys"
)

// Stages are the stages of an operation of kind k, in order.
func Stages(k Kind) []Stage {
	switch k {
	case KindRotate:
		return []Stage{StageAddKey, StageWriteKey, StageRewrite, StageDropOld}
	case KindEncrypt:
		return []Stage{StageRewrite}
	}
	return nil
}

// ChangesFile reports whether stage s writes a new configuration to the API
// servers (and restarts them); otherwise it works through the API.
func (s Stage) ChangesFile() bool { return s != StageRewrite }

// Op is an operation in progress.
type Op struct {
	Kind  Kind  `json:"kind"`
	Stage Stage `json:"stage"`
	// NewKey is the name of the key a rotation brings in.
	NewKey string `json:"new_key,omitempty"`
	// Restarted is set once every API server runs with the stage's
	// configuration (restarted after it was written).
	Restarted bool      `json:"restarted,omitempty"`
	StartedAt time.Time `json:"started_at"`
}

// Next is the op at its next stage, Restarted cleared; nil after the last.
func (o *Op) Next() *Op {
	st := Stages(o.Kind)
	i := slices.Index(st, o.Stage)
	if i < 0 || i+1 >= len(st) {
		return nil
	}
	n := *o
	n.Stage, n.Restarted = st[i+1], false
	return &n
}

// Record is what the state directory keeps about the key besides the
// configuration.
type Record struct {
	// RotateHandled says that the rotation rotate_encryption_key: true asks
	// for was started: it is not started again while the key stays true.
	// Removing the key (or false) clears it.
	RotateHandled bool `json:"rotate_handled,omitempty"`
	// Op is the operation in progress; nil when none.
	Op *Op `json:"op,omitempty"`
	// LastRotated is when the last rotation ended, and the key it brought.
	LastRotated    time.Time `json:"last_rotated,omitzero"`
	LastRotatedKey string    `json:"last_rotated_key,omitempty"`
}

// LoadRecord reads the record of the state directory dir; a zero Record
// when there is none.
func LoadRecord(dir string) (Record, error) {
	var r Record
	if err := statedir.ReadJSON(dir, recordFile, &r); err != nil {
		return Record{}, fmt.Errorf("read the secrets encryption record: %w; repair it, or move it away "+
			"(a rotation in progress then stays at the keys %s holds)", err, File)
	}
	if r.Op != nil && !slices.Contains(Stages(r.Op.Kind), r.Op.Stage) {
		return Record{}, fmt.Errorf("read the secrets encryption record: %w", &statedir.DamagedError{
			Path: dir + "/" + recordFile, Err: fmt.Errorf("unknown operation %q at stage %q", r.Op.Kind, r.Op.Stage)})
	}
	return r, nil
}

// SaveRecord replaces the record of dir atomically, mode 0600.
func SaveRecord(dir string, r Record) error {
	if err := statedir.WriteJSON(dir, recordFile, r); err != nil {
		return fmt.Errorf("save the secrets encryption record: %w", err)
	}
	return nil
}

// Desired is the configuration the API servers must have while op is at
// its stage, from cur, the saved configuration. It depends on the keys of
// cur and the order of the old ones, not on where the new key is, so that
// the configuration saved at any point of a stage change gives the same
// result:
//
//   - no op, or KindEncrypt: cur.
//   - StageAddKey: the other keys in cur's order, the new key last. A new
//     key not saved yet (a stop between the record and the key) gives cur.
//   - StageWriteKey, StageRewrite: the new key first, then the others.
//   - StageDropOld: the new key alone.
//
// A rotation past its first stage whose new key is not in cur is an
// error: its Secrets may be encrypted with a key rigger no longer has.
func Desired(cur *Config, op *Op) (*Config, error) {
	if op == nil || op.Kind != KindRotate {
		return cur, nil
	}
	nk, ok := cur.Key(op.NewKey)
	if !ok {
		if op.Stage == StageAddKey {
			return cur, nil
		}
		return nil, fmt.Errorf("the rotation at stage %s brings key %s, which the saved encryption configuration lacks (keys %v): "+
			"restore %s from a backup of the state directory, or from /etc/kubernetes/ssl/encryption.yaml of a controlplane node",
			op.Stage, op.NewKey, cur.Names(), File)
	}
	var others []Key
	for _, k := range cur.Keys {
		if k.Name != op.NewKey {
			others = append(others, k)
		}
	}
	out := &Config{IdentityFirst: cur.IdentityFirst}
	switch op.Stage {
	case StageAddKey:
		out.Keys = append(others, nk)
	case StageWriteKey, StageRewrite:
		out.Keys = append([]Key{nk}, others...)
	case StageDropOld:
		out.Keys = []Key{nk}
	default:
		return nil, fmt.Errorf("unknown rotation stage %q", op.Stage)
	}
	return out, nil
}

// Accepted are the configurations a controlplane node may hold while the
// state has cur and op (the saved configuration keeps every key until the
// API servers run without it, so cur has the old keys until StageDropOld
// is done): the one Desired gives, those of the op's other
// stages, and the one before the op began (cur without the new key), as a
// stop may leave any of them on a node. A node holding any other has a
// key the state does not know.
func Accepted(cur *Config, op *Op) []*Config {
	out := []*Config{cur}
	if op == nil || op.Kind != KindRotate {
		return out
	}
	for _, st := range Stages(KindRotate) {
		if c, err := Desired(cur, &Op{Kind: KindRotate, Stage: st, NewKey: op.NewKey}); err == nil {
			out = append(out, c)
		}
	}
	before := &Config{IdentityFirst: cur.IdentityFirst}
	for _, k := range cur.Keys {
		if k.Name != op.NewKey {
			before.Keys = append(before.Keys, k)
		}
	}
	if len(before.Keys) > 0 {
		out = append(out, before)
	}
	return out
}

// Covers reports whether every key of o (name and secret) is among c's:
// a configuration with c's keys reads whatever o's wrote.
func (c *Config) Covers(o *Config) bool {
	for _, k := range o.Keys {
		if got, ok := c.Key(k.Name); !ok || got.Secret != k.Secret {
			return false
		}
	}
	return true
}
