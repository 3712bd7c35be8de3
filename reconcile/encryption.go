package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/spec"
)

// Encryption is what a plan knows of the Secrets encryption key rigger
// generates (secrets_encryption_config.enabled without custom_config):
// where it comes from, the keys' names (never their secrets), and the stage
// of the operation on it that the plan carries out.
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

// resolvedEncryption is the cluster's generated encryption for a plan: the
// key and the stage of the operation on it the plan carries out.
type resolvedEncryption struct {
	// cur is the configuration the state directory keeps (with the new
	// key of a rotation the plan starts) and want the one the API servers
	// get at the record's stage (secretsenc.Desired); file is want's.
	cur, want *secretsenc.Config
	file      []byte
	// record is the record as the apply saves it before anything changes;
	// its Op is the operation whose stage the plan carries out.
	record secretsenc.Record
	info   *Encryption
	// saveConfig and saveRecord are set when the state directory must be
	// written before apply; starts when the plan starts a rotation (its
	// record gets the time it starts).
	saveConfig, saveRecord, starts bool
	// newKey says why this plan's new key must not be applied.
	newKey error
}

// encryptionPath is the API server's encryption configuration on a node.
const encryptionPath = desired.EncryptionConfigFile

// resolveEncryption finds the generated encryption key of the cluster: the
// state directory's (checked against the nodes'), or one recovered from a
// controlplane node, or, only when no controlplane node that may hold one
// is left unanswered, a new one. nil when cluster.yml asks for no
// generated key; a cluster that had one and no longer asks for encryption
// is refused (rigger does not turn encryption off).
func (s *Session) resolveEncryption(ctx context.Context, o *observe.Cluster) (*resolvedEncryption, error) {
	cur, err := secretsenc.Load(s.opts.StateDir)
	if err != nil {
		return nil, stateErr(err)
	}
	rec, err := secretsenc.LoadRecord(s.opts.StateDir)
	if err != nil {
		return nil, stateErr(err)
	}
	if !desired.GeneratedEncryption(s.c) {
		return nil, s.checkEncryptionKept(cur, o)
	}
	r := &resolvedEncryption{record: rec, info: &Encryption{}}
	if cur != nil {
		r.info.Source = PKISource{Kind: PKIStateDir, From: s.opts.StateDir}
		if err := s.checkSameKeys(cur, rec.Op, o); err != nil {
			return nil, stalls(ReasonStateDamaged, err)
		}
	} else {
		var from string
		cur, from, err = s.recoverEncryption(ctx, o)
		switch {
		case err != nil:
			return nil, err
		case cur != nil:
			r.info.Source = PKISource{Kind: PKIRecovered, From: from}
			// The record of a lost state is lost with it: the nodes' keys
			// are kept as they are.
			r.record.Op = nil
			r.saveConfig, r.saveRecord = true, rec.Op != nil
		default:
			if cur, err = secretsenc.New(); err != nil {
				return nil, err
			}
			r.info.Source = PKISource{Kind: PKINew}
			r.newKey = s.newKeyBlocked(o)
			// As RKE: Secrets written before encryption was on are
			// rewritten, encrypted.
			r.record.Op = &secretsenc.Op{Kind: secretsenc.KindEncrypt, Stage: secretsenc.StageRewrite, StartedAt: s.opts.Now().UTC()}
			r.saveConfig, r.saveRecord = true, true
		}
	}
	if requested := s.c.RotateEncryptionKey && !r.record.RotateHandled; r.record.Op == nil && (requested || s.opts.RotateKey) {
		// The plan starts the rotation asked for (rotate_encryption_key
		// once, or rigger encrypt rotate-key): its first stage adds a new
		// key, second, on every API server.
		r.record.RotateHandled = r.record.RotateHandled || requested
		r.record.Op = &secretsenc.Op{Kind: secretsenc.KindRotate, Stage: secretsenc.StageAddKey}
		r.starts = true
	}
	if op := r.record.Op; op != nil && op.Kind == secretsenc.KindRotate && op.Stage == secretsenc.StageAddKey {
		// A rotation starting, or stopped between its record and its key:
		// the key is made now and saved before anything changes.
		if _, ok := cur.Key(op.NewKey); !ok {
			k, err := secretsenc.NewKey(cur.Names())
			if err != nil {
				return nil, err
			}
			if op.NewKey == "" {
				op.NewKey = k.Name
			}
			k.Name = op.NewKey
			cur = &secretsenc.Config{IdentityFirst: cur.IdentityFirst, Keys: append(slices.Clone(cur.Keys), k)}
			r.saveConfig = true
		}
	}
	r.cur = cur
	if r.want, err = secretsenc.Desired(cur, r.record.Op); err != nil {
		return nil, stalls(ReasonStateDamaged, err)
	}
	r.file = r.want.Marshal()
	r.info.Keys = r.want.Names()
	r.info.LastRotated, r.info.LastRotatedKey = r.record.LastRotated, r.record.LastRotatedKey
	if op := r.record.Op; op != nil {
		r.info.Op = op
		st := secretsenc.Stages(op.Kind)
		r.info.Stages = st[slices.Index(st, op.Stage):]
	}
	if !s.c.RotateEncryptionKey && r.record.RotateHandled && r.record.Op == nil {
		// The request is gone from cluster.yml: a later one rotates again.
		r.record.RotateHandled = false
		r.saveRecord = true
	}
	return r, nil
}

// checkEncryptionKept refuses a cluster.yml without the generated key for
// a cluster that has one: the API servers would lose the key of the
// Secrets stored encrypted.
func (s *Session) checkEncryptionKept(cur *secretsenc.Config, o *observe.Cluster) error {
	if e := s.c.Services.KubeAPI.SecretsEncryptionConfig; e != nil && e.Enabled {
		// The user's custom_config: theirs to manage, but it must go on
		// reading what the generated key encrypted.
		return s.checkCustomKeepsKeys(cur, e.CustomConfig)
	}
	where := ""
	if cur != nil {
		where = "the state directory " + s.opts.StateDir + " holds its key (" + secretsenc.File + ")"
	} else {
		empty := observe.FileHash(nil)
		for _, a := range sortedAddrs(o) {
			n := o.Nodes[a]
			_, api := n.Containers[desired.KubeAPIServer]
			if h := n.Files[encryptionPath]; n.Reachable && api && h != "" && h != empty {
				where = "node " + a + " has " + encryptionPath
				break
			}
		}
	}
	if where == "" {
		return nil
	}
	return stalls(ReasonInvalidSpec, fmt.Errorf("services.kube-api.secrets_encryption_config: Secrets of cluster %s are encrypted at rest (%s), and cluster.yml no longer enables it: "+
		"rigger does not turn encryption off (every Secret would first have to be rewritten in clear, with the identity provider first); "+
		"set secrets_encryption_config.enabled: true again", s.c.ClusterName, where))
}

// checkCustomKeepsKeys refuses a custom_config that replaces the key
// rigger generated (in the state directory) without holding its secret:
// the API servers could no longer read the Secrets encrypted with it. The
// secret is looked for anywhere in custom_config (a key of any provider).
func (s *Session) checkCustomKeepsKeys(cur *secretsenc.Config, custom spec.Object) error {
	if cur == nil || len(custom) == 0 {
		return nil
	}
	b, err := json.Marshal(custom)
	if err != nil {
		return stalls(ReasonInvalidSpec, fmt.Errorf("services.kube-api.secrets_encryption_config.custom_config: %w", err))
	}
	for _, k := range cur.Keys {
		if !bytes.Contains(b, []byte(k.Secret)) {
			return stalls(ReasonInvalidSpec, fmt.Errorf("services.kube-api.secrets_encryption_config.custom_config does not hold key %s, which rigger generated and Secrets of cluster %s may be encrypted with "+
				"(its secret is in %s): the API servers could no longer read them; add it to custom_config's aescbc keys (after your own, to go on reading), "+
				"or remove custom_config to keep the generated key", k.Name, s.c.ClusterName, filepath.Join(s.opts.StateDir, secretsenc.File)))
		}
	}
	return nil
}

// checkSameKeys refuses a state directory whose key is not the one the
// controlplane nodes hold: applying it would make the Secrets stored
// encrypted unreadable. A node may hold any configuration of the
// operation in progress (secretsenc.Accepted).
func (s *Session) checkSameKeys(cur *secretsenc.Config, op *secretsenc.Op, o *observe.Cluster) error {
	ok := map[string]bool{}
	for _, c := range secretsenc.Accepted(cur, op) {
		ok[observe.FileHash(c.Marshal())] = true
	}
	for _, a := range sortedAddrs(o) {
		n := o.Nodes[a]
		if h, has := n.Files[encryptionPath]; has && !ok[h] && h != observe.FileHash(nil) {
			return fmt.Errorf("the secrets encryption key in state directory %s (%s) is not the one node %s holds in %s: "+
				"the state directory belongs to another cluster, or the file was changed by hand; give the right --state-dir, "+
				"or move %s away and rigger recovers the key from a controlplane node", s.opts.StateDir, secretsenc.File, a, encryptionPath, secretsenc.File)
		}
	}
	return nil
}

// recoverEncryption reads the encryption configuration of the reachable
// nodes that have one and returns the one whose keys cover all the others'
// (as on every node during a rotation), and the node it came from; nil
// when no node has one.
func (s *Session) recoverEncryption(ctx context.Context, o *observe.Cluster) (*secretsenc.Config, string, error) {
	type found struct {
		node string
		cfg  *secretsenc.Config
	}
	var all []found
	read := map[string]bool{}
	empty := observe.FileHash(nil)
	for _, a := range sortedAddrs(o) {
		n := o.Nodes[a]
		h := n.Files[encryptionPath]
		if !n.Reachable || h == "" || h == empty || read[h] {
			continue
		}
		read[h] = true
		e, err := s.docker(ctx, a)
		if err != nil {
			return nil, "", retries(ReasonFailed, fmt.Errorf("recover the secrets encryption key from node %s: %w", a, err))
		}
		files, err := dockerop.ReadDir(ctx, e, a, s.c.SystemImages.Alpine, strings.TrimSuffix(desired.SSLDir, "/"))
		if err != nil {
			return nil, "", retries(ReasonFailed, fmt.Errorf("recover the secrets encryption key from node %s: %w", a, err))
		}
		cfg, err := secretsenc.Parse("node "+a+" "+encryptionPath, files[encryptionPath])
		if err != nil {
			return nil, "", stalls(ReasonInvalidSpec, fmt.Errorf("%w: rigger takes as its own only a configuration of one aescbc provider and identity; "+
				"give it in secrets_encryption_config.custom_config to keep it, or restore %s in the state directory %s", err, secretsenc.File, s.opts.StateDir))
		}
		all = append(all, found{a, cfg})
	}
	for _, f := range all {
		if !slices.ContainsFunc(all, func(g found) bool { return !f.cfg.Covers(g.cfg) }) {
			s.opts.Log.Warn("state directory had no secrets encryption key: recovered it from a node",
				"cluster", s.c.ClusterName, "node", f.node, "keys", f.cfg.Names(), "state_dir", s.opts.StateDir)
			return f.cfg, f.node, nil
		}
	}
	if len(all) > 0 {
		var names []string
		for _, f := range all {
			names = append(names, fmt.Sprintf("%s: %v", f.node, f.cfg.Names()))
		}
		return nil, "", stalls(ReasonStateDamaged, fmt.Errorf("the state directory %s has no secrets encryption key, and the controlplane nodes hold different ones (%s), none with all the others' keys: "+
			"restore %s in the state directory from a backup", s.opts.StateDir, strings.Join(names, "; "), secretsenc.File))
	}
	return nil, "", nil
}

// newKeyBlocked says why a new key must not be applied: nodes that may
// hold the cluster's key did not answer. nil when every node answered.
func (s *Session) newKeyBlocked(o *observe.Cluster) error {
	var down []string
	for _, a := range sortedAddrs(o) {
		if !o.Nodes[a].Reachable {
			down = append(down, a)
		}
	}
	if len(down) == 0 {
		return nil
	}
	return fmt.Errorf("the state directory %s has no secrets encryption key and nodes %s did not answer: "+
		"rigger makes a new key only when every node answers and none has one (a new key would make the Secrets encrypted with the old one unreadable); "+
		"try again when they answer", s.opts.StateDir, strings.Join(down, ", "))
}

// saveEncryption writes to the state directory, before anything changes
// on the nodes, what the plan found or made: the record first (a stop
// before the key is saved leaves a rotation whose first stage makes the key
// again), then the key. It returns the record as saved: a rotation the
// plan starts gets its start time.
func (s *Session) saveEncryption(r *resolvedEncryption) (secretsenc.Record, error) {
	if r == nil {
		return secretsenc.Record{}, nil
	}
	rec := r.record
	if r.starts {
		op := *rec.Op
		op.StartedAt = s.opts.Now().UTC()
		rec.Op = &op
		s.opts.Log.Info("rotating the secrets encryption key", "cluster", s.c.ClusterName, "new_key", op.NewKey, "keys", r.want.Names())
	}
	if r.saveRecord || r.starts {
		if err := secretsenc.SaveRecord(s.opts.StateDir, rec); err != nil {
			return rec, err
		}
	}
	if r.saveConfig {
		if err := secretsenc.Save(s.opts.StateDir, r.cur); err != nil {
			return rec, err
		}
	}
	if rec.Op != nil {
		crashpoint.Reach(crashpoint.EncryptionStageSaved)
	}
	return rec, nil
}

// checkRotateKey refuses Options.RotateKey (rigger encrypt rotate-key) for
// a cluster.yml without a key rigger generates, as RKE does.
func checkRotateKey(c *spec.Cluster) error {
	if e := c.Services.KubeAPI.SecretsEncryptionConfig; e == nil || !e.Enabled {
		return stalls(ReasonInvalidSpec, errors.New("can't rotate the secrets encryption key: services.kube-api.secrets_encryption_config.enabled is not true in cluster.yml"))
	}
	if !desired.GeneratedEncryption(c) {
		return stalls(ReasonInvalidSpec, errors.New("can't rotate the secrets encryption key: rigger rotates only the key it generates, not one of secrets_encryption_config.custom_config "+
			"or of the file kube-api's extra_args name"))
	}
	return nil
}

// reload is why the API servers must read the plan's encryption
// configuration again: a stage that changes it, not yet read by every
// one (Op.Restarted); "" when they need not.
func (r *resolvedEncryption) reload() string {
	if r == nil || r.record.Op == nil || !r.record.Op.Stage.ChangesFile() || r.record.Op.Restarted {
		return ""
	}
	op := r.record.Op
	return fmt.Sprintf("secrets encryption %s, stage %s: reads %s again", op.Kind, op.Stage, encryptionPath)
}

// endEncryptionStage ends, once the plan's steps are carried out, the
// stage of the operation on the key the plan carried (rec.Op, rec as
// saveEncryption saved it): a stage that changed the API servers'
// configuration is done when every controlplane node answered (the plan
// restarted each API server with it, one at a time with health checks);
// the rewrite stage rewrites every Secret through the API server (cs) now.
// The record then moves to the next stage, which the next plan carries
// out; the saved configuration drops a key only here, once no API server
// runs with it. say reports progress.
func (s *Session) endEncryptionStage(ctx context.Context, pl *Planned, rec secretsenc.Record, cs kubernetes.Interface, say func(msg string, err error)) error {
	r, op := pl.encryption, rec.Op
	if r == nil || op == nil {
		return nil
	}
	fail := func(err error) error {
		say(string(op.Stage), err)
		return fmt.Errorf("secrets encryption %s, stage %s (it resumes there on the next apply): %w", op.Kind, op.Stage, err)
	}
	switch {
	case op.Stage.ChangesFile():
		var down []string
		for _, a := range pl.Unreachable() {
			if dn, ok := pl.Desired.Node(a); ok && dn.HasRole(spec.RoleControlPlane) {
				down = append(down, a)
			}
		}
		if len(down) > 0 {
			return fail(fmt.Errorf("controlplane nodes %s did not answer: every API server must read the new configuration before the next stage; try again when they answer", strings.Join(down, ", ")))
		}
		say("every API server reads "+encryptionPath+" with keys "+strings.Join(r.want.Names(), ", "), nil)
	case op.Stage == secretsenc.StageRewrite:
		if cs == nil {
			return fail(errors.New("the API server could not be reached to rewrite the Secrets"))
		}
		n, err := secretsenc.RewriteSecrets(ctx, cs, func(n int) {
			s.opts.Log.Debug("rewriting Secrets", "cluster", s.c.ClusterName, "rewritten", n)
		})
		if err != nil {
			return fail(err)
		}
		say(fmt.Sprintf("%d Secrets rewritten, encrypted with key %s", n, r.want.Keys[0].Name), nil)
	}
	crashpoint.Reach(crashpoint.EncryptionStageDone)
	if !bytes.Equal(r.want.Marshal(), r.cur.Marshal()) {
		if err := secretsenc.Save(s.opts.StateDir, r.want); err != nil {
			return err
		}
	}
	if rec.Op = op.Next(); rec.Op == nil && op.Kind == secretsenc.KindRotate {
		rec.LastRotated, rec.LastRotatedKey = s.opts.Now().UTC(), op.NewKey
		s.opts.Log.Info("secrets encryption key rotated", "cluster", s.c.ClusterName, "key", op.NewKey)
	}
	return secretsenc.SaveRecord(s.opts.StateDir, rec)
}

// next is the stage of the operation on the key that follows the plan's,
// once it is done; nil when none.
func (r *resolvedEncryption) next() *secretsenc.Op {
	if r == nil || r.record.Op == nil {
		return nil
	}
	return r.record.Op.Next()
}

// work reports whether applying does something about the key: save it or
// its record, or run an operation's stage.
func (r *resolvedEncryption) work() bool {
	return r != nil && (r.saveConfig || r.saveRecord || r.record.Op != nil)
}
