package secretsenc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// path is the API servers' encryption configuration on a node.
const path = desired.EncryptionConfigFile

// Want is what cluster.yml and the command line ask of the key.
type Want struct {
	// Cluster and StateDir are the cluster_name and the state directory,
	// for messages.
	Cluster, StateDir string
	// Generated: cluster.yml asks for the key rigger generates
	// (desired.GeneratedEncryption). Enabled and Custom are
	// secrets_encryption_config's enabled and custom_config.
	Generated, Enabled bool
	Custom             spec.Object
	// RotateRequested is cluster.yml's rotate_encryption_key; RotateKey is
	// rigger encrypt rotate-key's request.
	RotateRequested, RotateKey bool
	// Now is the time of the plan.
	Now time.Time
}

// WantOf is what c asks of the key; rotateKey is the command line's
// request.
func WantOf(c *spec.Cluster, stateDir string, rotateKey bool, now time.Time) Want {
	w := Want{Cluster: c.ClusterName, StateDir: stateDir, Generated: desired.GeneratedEncryption(c),
		RotateRequested: c.RotateEncryptionKey, RotateKey: rotateKey, Now: now}
	if e := c.Services.KubeAPI.SecretsEncryptionConfig; e != nil {
		w.Enabled, w.Custom = e.Enabled, e.CustomConfig
	}
	return w
}

// CheckRotateKey refuses rigger encrypt rotate-key's request for a
// cluster.yml without a key rigger generates, as RKE does.
func CheckRotateKey(c *spec.Cluster) error {
	if e := c.Services.KubeAPI.SecretsEncryptionConfig; e == nil || !e.Enabled {
		return stall.Stalls(stall.InvalidSpec, errors.New("can't rotate the secrets encryption key: services.kube-api.secrets_encryption_config.enabled is not true in cluster.yml"))
	}
	if !desired.GeneratedEncryption(c) {
		return stall.Stalls(stall.InvalidSpec, errors.New("can't rotate the secrets encryption key: rigger rotates only the key it generates, not one of secrets_encryption_config.custom_config "+
			"or of the file kube-api's extra_args name"))
	}
	return nil
}

// Source says where a plan's key comes from.
type Source string

const (
	// SourceState: the state directory's.
	SourceState Source = "state-directory"
	// SourceRecovered: read from a controlplane node, the state directory
	// having none.
	SourceRecovered Source = "recovered"
	// SourceNew: a new key, since no controlplane node has one.
	SourceNew Source = "new"
)

// Plan is the generated key a plan gives the API servers and the stage of
// the operation on it the plan carries out: the plan's staged operation of
// the key (staged.Operation, stage.go).
type Plan struct {
	// Cur is the configuration the state directory keeps (with the new
	// key of a rotation the plan starts); Want is the one the API servers
	// get at the record's stage (Desired), File its text.
	Cur, Want *Config
	File      []byte
	// Record is the record as the apply saves it before anything changes;
	// its Op is the operation whose stage the plan carries out.
	Record Record
	// Source is where the key comes from; From the node it was recovered
	// from.
	Source Source
	From   string
	// SaveConfig and SaveRecord are set when the state directory must be
	// written before apply; Starts when the plan starts a rotation (its
	// record gets the time it starts).
	SaveConfig, SaveRecord, Starts bool
	// NewKeyBlocked says why the plan's new key must not be applied: nodes
	// that may hold the cluster's did not answer.
	NewKeyBlocked error
	// Queued is set when a rotation is asked for while another operation
	// is under way: the plan after that operation's last stage starts it.
	Queued bool
}

// Decide is the generated key of a plan, from what cluster.yml asks (w),
// the state directory's key and record (state, nil when it has none; rec)
// and the observed nodes (o; their Contents are read when state is nil):
//
//   - the state directory's key, refused when a node holds another (one
//     that no stage of the operation in progress accounts for);
//   - without one, the key a controlplane node holds (the one whose keys
//     cover all the others', as on every node during a rotation), the
//     record of a lost state being lost with it;
//   - without any, a new one, with the rewrite of the Secrets written
//     before (as RKE); blocked while nodes that may hold one did not answer.
//
// It then starts the rotation asked for (rotate_encryption_key once, or
// w.RotateKey) when no operation is under way: its first stage adds a new
// key; after another operation's last stage (Queued); and not a second
// time while one is under way. A
// rotation's new key is made here when the state lacks it (a stop between
// the record and the key). Decide is nil when cluster.yml asks for no
// generated key; a cluster that had one and no longer asks for encryption
// is refused (rigger does not turn encryption off).
func Decide(w Want, state *Config, rec Record, o *observe.Cluster) (*Plan, error) {
	if !w.Generated {
		return nil, checkKept(w, state, o)
	}
	p := &Plan{Record: rec}
	cur := state
	switch {
	case cur != nil:
		p.Source = SourceState
		if err := checkSameKeys(w, cur, rec.Op, o); err != nil {
			return nil, stall.Stalls(stall.StateDamaged, err)
		}
	default:
		var err error
		if cur, p.From, err = recovered(w, o); err != nil {
			return nil, err
		}
		if cur != nil {
			p.Source = SourceRecovered
			// The record of a lost state is lost with it: the nodes'
			// keys are kept as they are.
			p.Record.Op = nil
			p.SaveConfig, p.SaveRecord = true, rec.Op != nil
			break
		}
		if cur, err = New(); err != nil {
			return nil, err
		}
		p.Source = SourceNew
		p.NewKeyBlocked = newKeyBlocked(w, o)
		// As RKE: Secrets written before encryption was on are
		// rewritten, encrypted.
		p.Record.Op = &Op{Kind: KindEncrypt, Stage: StageRewrite, StartedAt: w.Now.UTC()}
		p.SaveConfig, p.SaveRecord = true, true
	}
	if requested := w.RotateRequested && !p.Record.RotateHandled; requested || w.RotateKey {
		switch op := p.Record.Op; {
		case op == nil:
			p.Record.RotateHandled = p.Record.RotateHandled || requested
			p.Record.Op = &Op{Kind: KindRotate, Stage: StageAddKey}
			p.Starts = true
		case op.Kind != KindRotate:
			// It starts once the operation under way is done.
			p.Queued = true
		}
	}
	if op := p.Record.Op; op != nil && op.Kind == KindRotate && op.Stage == StageAddKey {
		if _, ok := cur.Key(op.NewKey); !ok {
			k, err := NewKey(cur.Names())
			if err != nil {
				return nil, err
			}
			if op.NewKey == "" {
				op.NewKey = k.Name
			}
			k.Name = op.NewKey
			cur = &Config{IdentityFirst: cur.IdentityFirst, Keys: append(slices.Clone(cur.Keys), k)}
			p.SaveConfig = true
		}
	}
	p.Cur = cur
	var err error
	if p.Want, err = Desired(cur, p.Record.Op); err != nil {
		return nil, stall.Stalls(stall.StateDamaged, err)
	}
	p.File = p.Want.Marshal()
	if !w.RotateRequested && p.Record.RotateHandled && p.Record.Op == nil {
		// The request is gone from cluster.yml: a later one rotates again.
		p.Record.RotateHandled = false
		p.SaveRecord = true
	}
	return p, nil
}

// Stages are the stages of the plan's operation still to run, its own
// first; nil when none.
func (p *Plan) Stages() []Stage {
	if p == nil || p.Record.Op == nil {
		return nil
	}
	op := p.Record.Op
	st := Stages(op.Kind)
	return st[slices.Index(st, op.Stage):]
}

// Reload is why the API servers must read the plan's configuration again:
// a stage that changes it, not yet read by every one (Op.Restarted); ""
// when they need not.
func (p *Plan) Reload() string {
	if p == nil || p.Record.Op == nil {
		return ""
	}
	op := p.Record.Op
	if !op.Stage.ChangesFile() || op.Restarted {
		return ""
	}
	return fmt.Sprintf("secrets encryption %s, stage %s: reads %s again", op.Kind, op.Stage, path)
}

// NextOp is the stage that follows the plan's once it is done (the first
// of a rotation Queued after the plan's operation); nil when none.
func (p *Plan) NextOp() *Op {
	if p == nil || p.Record.Op == nil {
		return nil
	}
	if next := p.Record.Op.Next(); next != nil || !p.Queued {
		return next
	}
	return &Op{Kind: KindRotate, Stage: StageAddKey}
}

// Work reports whether applying does something about the key: save it or
// its record, or run an operation's stage.
func (p *Plan) Work() bool {
	return p != nil && (p.SaveConfig || p.SaveRecord || p.Record.Op != nil)
}

// checkKept refuses a cluster.yml without the generated key for a cluster
// that has one: the API servers would lose the key of the Secrets stored
// encrypted.
func checkKept(w Want, cur *Config, o *observe.Cluster) error {
	if w.Enabled {
		// The user's custom_config: theirs to manage, but it must go on
		// reading what the generated key encrypted.
		return checkCustomKeepsKeys(w, cur)
	}
	where := ""
	if cur != nil {
		where = "the state directory " + w.StateDir + " holds its key (" + File + ")"
	} else {
		for _, a := range addrs(o) {
			n := o.Nodes[a]
			_, api := n.Containers[desired.KubeAPIServer]
			if h := n.Files[path]; n.Reachable && api && h != "" && h != observe.FileHash(nil) {
				where = "node " + a + " has " + path
				break
			}
		}
	}
	if where == "" {
		return nil
	}
	return stall.Stalls(stall.InvalidSpec, fmt.Errorf("services.kube-api.secrets_encryption_config: Secrets of cluster %s are encrypted at rest (%s), and cluster.yml no longer enables it: "+
		"rigger does not turn encryption off (every Secret would first have to be rewritten in clear, with the identity provider first); "+
		"set secrets_encryption_config.enabled: true again", w.Cluster, where))
}

// checkCustomKeepsKeys refuses a custom_config that replaces the key
// rigger generated (in the state directory) without holding its secret:
// the API servers could no longer read the Secrets encrypted with it. The
// secret is looked for anywhere in custom_config (a key of any provider).
func checkCustomKeepsKeys(w Want, cur *Config) error {
	if cur == nil || len(w.Custom) == 0 {
		return nil
	}
	b, err := json.Marshal(w.Custom)
	if err != nil {
		return stall.Stalls(stall.InvalidSpec, fmt.Errorf("services.kube-api.secrets_encryption_config.custom_config: %w", err))
	}
	for _, k := range cur.Keys {
		if !bytes.Contains(b, []byte(k.Secret)) {
			return stall.Stalls(stall.InvalidSpec, fmt.Errorf("services.kube-api.secrets_encryption_config.custom_config does not hold key %s, which rigger generated and Secrets of cluster %s may be encrypted with "+
				"(its secret is in %s): the API servers could no longer read them; add it to custom_config's aescbc keys (after your own, to go on reading), "+
				"or remove custom_config to keep the generated key", k.Name, w.Cluster, filepath.Join(w.StateDir, File)))
		}
	}
	return nil
}

// checkSameKeys refuses a state directory whose key is not the one the
// controlplane nodes hold: applying it would make the Secrets stored
// encrypted unreadable. A node may hold any configuration of the
// operation in progress (Accepted), as rigger writes it or as RKE's file
// deployer does (`echo -e "$FILE_DEPLOY"`: the same text and a newline).
func checkSameKeys(w Want, cur *Config, op *Op, o *observe.Cluster) error {
	ok := map[string]bool{}
	for _, c := range Accepted(cur, op) {
		b := c.Marshal()
		ok[observe.FileHash(b)] = true
		ok[observe.FileHash(append(b, '\n'))] = true
	}
	for _, a := range addrs(o) {
		if h, has := o.Nodes[a].Files[path]; has && !ok[h] && h != observe.FileHash(nil) {
			return fmt.Errorf("the secrets encryption key in state directory %s (%s) is not the one node %s holds in %s: "+
				"the state directory belongs to another cluster, or the file was changed by hand; give the right --state-dir, "+
				"or move %s away and rigger recovers the key from a controlplane node", w.StateDir, File, a, path, File)
		}
	}
	return nil
}

// NeedsContents reports whether Decide reads the nodes' files (a state
// directory without the key, for a cluster.yml that asks for it).
func NeedsContents(w Want, state *Config) bool { return w.Generated && state == nil }

// recovered is the encryption configuration the reachable nodes hold (from
// their Contents): the one whose keys cover all the others' (as on every
// node during a rotation), and the node it came from; nil when no node has
// one.
func recovered(w Want, o *observe.Cluster) (*Config, string, error) {
	type found struct {
		node string
		cfg  *Config
	}
	var all []found
	read := map[string]bool{}
	for _, a := range addrs(o) {
		n := o.Nodes[a]
		h := n.Files[path]
		if !n.Reachable || h == "" || h == observe.FileHash(nil) || read[h] {
			continue
		}
		read[h] = true
		b, ok := n.Contents[path]
		if !ok {
			return nil, "", stall.Retries(stall.Failed, fmt.Errorf("recover the secrets encryption key from node %s: its %s was not read", a, path))
		}
		cfg, err := Parse("node "+a+" "+path, b)
		if err != nil {
			return nil, "", stall.Stalls(stall.InvalidSpec, fmt.Errorf("%w: rigger takes as its own only a configuration of one aescbc provider and identity; "+
				"give it in secrets_encryption_config.custom_config to keep it, or restore %s in the state directory %s", err, File, w.StateDir))
		}
		all = append(all, found{a, cfg})
	}
	for _, f := range all {
		if !slices.ContainsFunc(all, func(g found) bool { return !f.cfg.Covers(g.cfg) }) {
			return f.cfg, f.node, nil
		}
	}
	if len(all) > 0 {
		var names []string
		for _, f := range all {
			names = append(names, fmt.Sprintf("%s: %v", f.node, f.cfg.Names()))
		}
		return nil, "", stall.Stalls(stall.StateDamaged, fmt.Errorf("the state directory %s has no secrets encryption key, and the controlplane nodes hold different ones (%s), none with all the others' keys: "+
			"restore %s in the state directory from a backup", w.StateDir, strings.Join(names, "; "), File))
	}
	return nil, "", nil
}

// newKeyBlocked says why a new key must not be applied: nodes that may
// hold the cluster's key did not answer. nil when every node answered.
func newKeyBlocked(w Want, o *observe.Cluster) error {
	var down []string
	for _, a := range addrs(o) {
		if !o.Nodes[a].Reachable {
			down = append(down, a)
		}
	}
	if len(down) == 0 {
		return nil
	}
	return fmt.Errorf("the state directory %s has no secrets encryption key and nodes %s did not answer: "+
		"rigger makes a new key only when every node answers and none has one (a new key would make the Secrets encrypted with the old one unreadable); "+
		"try again when they answer", w.StateDir, strings.Join(down, ", "))
}

// addrs are the observed nodes' addresses, sorted.
func addrs(o *observe.Cluster) []string {
	out := make([]string, 0, len(o.Nodes))
	for a := range o.Nodes {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}
