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

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/dockerop"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/secretsenc"
	"github.com/rigger/rigger/spec"
)

// Encryption is what a plan knows of the Secrets encryption key rigger
// generates (secrets_encryption_config.enabled without custom_config):
// where it comes from, the keys' names (never their secrets), and the work
// an apply does after the plan's steps.
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

// resolvedEncryption is the cluster's generated encryption for a plan.
type resolvedEncryption struct {
	cur    *secretsenc.Config
	record secretsenc.Record
	// file is the configuration the API servers get (Desired of cur at
	// the record's stage).
	file []byte
	info *Encryption
	// saveConfig and saveRecord are set when the state directory must be
	// written before apply.
	saveConfig, saveRecord bool
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
	r.cur = cur
	want, err := secretsenc.Desired(cur, r.record.Op)
	if err != nil {
		return nil, stalls(ReasonStateDamaged, err)
	}
	r.file = want.Marshal()
	r.info.Keys = want.Names()
	r.info.LastRotated, r.info.LastRotatedKey = r.record.LastRotated, r.record.LastRotatedKey
	switch {
	case r.record.Op != nil:
		r.info.Op = r.record.Op
	case s.c.RotateEncryptionKey && !r.record.RotateHandled || s.rotateKey:
		r.info.Op = &secretsenc.Op{Kind: secretsenc.KindRotate, Stage: secretsenc.StageAddKey}
	}
	if op := r.info.Op; op != nil {
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

// saveEncryption writes what the plan found or made to the state
// directory, before anything changes on the nodes.
func (s *Session) saveEncryption(r *resolvedEncryption) error {
	if r == nil {
		return nil
	}
	if r.saveRecord {
		if err := secretsenc.SaveRecord(s.opts.StateDir, r.record); err != nil {
			return err
		}
	}
	if r.saveConfig {
		return secretsenc.Save(s.opts.StateDir, r.cur)
	}
	return nil
}

// RequestKeyRotation makes this session's Plan show, and its Apply carry
// out, a rotation of the generated secrets encryption key, whatever
// rotate_encryption_key says (rigger encrypt rotate-key). As RKE, it
// refuses a cluster.yml without a key rigger generates.
func (s *Session) RequestKeyRotation() error {
	if e := s.c.Services.KubeAPI.SecretsEncryptionConfig; e == nil || !e.Enabled {
		return stalls(ReasonInvalidSpec, errors.New("can't rotate the secrets encryption key: services.kube-api.secrets_encryption_config.enabled is not true in cluster.yml"))
	}
	if !desired.GeneratedEncryption(s.c) {
		return stalls(ReasonInvalidSpec, errors.New("can't rotate the secrets encryption key: rigger rotates only the key it generates, not one of secrets_encryption_config.custom_config "+
			"or of the file kube-api's extra_args name"))
	}
	s.rotateKey = true
	return nil
}

// encryptionWork carries out, after the plan's steps, the operation on the
// encryption key the record holds, stage by stage, and starts the rotation
// cluster.yml asks for (rotate_encryption_key) once, or the one
// RequestKeyRotation asks for. Each stage is recorded
// before it acts; a stage that changes the configuration ends when every
// API server was restarted with it (one at a time, health checked), so an
// apply stopped anywhere resumes at a stage whose keys read every Secret.
func (s *Session) encryptionWork(ctx context.Context, lk *Lock, pl *Planned, ao ApplyOptions) error {
	if pl.encryption == nil {
		return nil
	}
	dir := s.opts.StateDir
	if rec, err := secretsenc.LoadRecord(dir); err == nil && rec.Op != nil && rec.Op.Kind == secretsenc.KindRotate {
		s.rotateKey = false // the rotation in progress is the one asked for
	}
	applied := pl // the plan just applied, for the first stage only
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, err := secretsenc.LoadRecord(dir)
		if err != nil {
			return stateErr(err)
		}
		cur, err := secretsenc.Load(dir)
		if err != nil || cur == nil {
			if err == nil {
				err = fmt.Errorf("the secrets encryption key is gone from the state directory %s during an apply", dir)
			}
			return stateErr(err)
		}
		op := rec.Op
		if op == nil {
			requested := s.c.RotateEncryptionKey && !rec.RotateHandled
			if !requested && !s.rotateKey {
				return nil
			}
			k, err := secretsenc.NewKey(cur.Names())
			if err != nil {
				return err
			}
			// The record first: a stop before the key is saved leaves a
			// rotation whose first stage makes a key again.
			rec.RotateHandled = rec.RotateHandled || requested
			s.rotateKey = false
			rec.Op = &secretsenc.Op{Kind: secretsenc.KindRotate, Stage: secretsenc.StageAddKey, NewKey: k.Name, StartedAt: s.opts.Now().UTC()}
			if err := secretsenc.SaveRecord(dir, rec); err != nil {
				return err
			}
			s.opts.Log.Info("rotating the secrets encryption key", "cluster", s.c.ClusterName, "new_key", k.Name, "keys", cur.Names())
			cur.Keys = append(cur.Keys, k)
			if err := secretsenc.Save(dir, cur); err != nil {
				return err
			}
			continue
		}
		if _, ok := cur.Key(op.NewKey); op.Kind == secretsenc.KindRotate && !ok && op.Stage == secretsenc.StageAddKey {
			k, err := secretsenc.NewKey(nil)
			if err != nil {
				return err
			}
			k.Name = op.NewKey
			cur.Keys = append(cur.Keys, k)
		}
		want, err := secretsenc.Desired(cur, op)
		if err != nil {
			return stalls(ReasonStateDamaged, err)
		}
		// The saved configuration loses a key only once every API server
		// runs without it (below): until then a node may hold it, and the
		// state must still know it (secretsenc.Accepted).
		if !bytes.Equal(want.Marshal(), cur.Marshal()) && want.Covers(cur) {
			if err := secretsenc.Save(dir, want); err != nil {
				return err
			}
		}
		say := func(msg string, err error) {
			if ao.Hooks.Step != nil {
				ao.Hooks.Step("secrets encryption", msg, err)
			}
		}
		if ao.Hooks.Phase != nil {
			ao.Hooks.Phase("secrets-encryption", fmt.Sprintf("Secrets encryption: %s, stage %s (keys %s)", op.Kind, op.Stage, strings.Join(want.Names(), ", ")))
		}
		crashpoint.Reach(crashpoint.EncryptionStageSaved)
		if err := ctx.Err(); err != nil {
			return err
		}
		readAlready := applied != nil && restartedAll(applied, want.Marshal())
		applied = nil
		switch {
		case op.Stage.ChangesFile() && !op.Restarted:
			// A stage resumed after a stop: the apply's own plan may have
			// written its file and restarted every API server already.
			if readAlready {
				s.opts.Log.Info("the API servers read the stage's configuration already", "cluster", s.c.ClusterName, "stage", op.Stage)
			} else if err := s.restartAPIServers(ctx, lk, ao, op); err != nil {
				say("restart the API servers", err)
				return fmt.Errorf("secrets encryption %s, stage %s (it resumes there on the next apply): %w", op.Kind, op.Stage, err)
			}
			op.Restarted = true
			if err := secretsenc.SaveRecord(dir, rec); err != nil {
				return err
			}
			if !bytes.Equal(want.Marshal(), cur.Marshal()) {
				if err := secretsenc.Save(dir, want); err != nil {
					return err
				}
			}
			say("every API server reads "+encryptionPath+" with keys "+strings.Join(want.Names(), ", "), nil)
		case op.Stage == secretsenc.StageRewrite:
			n, err := s.rewriteSecrets(ctx)
			if err != nil {
				say("rewrite Secrets", err)
				return fmt.Errorf("secrets encryption %s, stage %s (it resumes there on the next apply): %w", op.Kind, op.Stage, err)
			}
			say(fmt.Sprintf("%d Secrets rewritten, encrypted with key %s", n, want.Keys[0].Name), nil)
		}
		crashpoint.Reach(crashpoint.EncryptionStageDone)
		rec.Op = op.Next()
		if rec.Op == nil && op.Kind == secretsenc.KindRotate {
			rec.LastRotated, rec.LastRotatedKey = s.opts.Now().UTC(), op.NewKey
			s.opts.Log.Info("secrets encryption key rotated", "cluster", s.c.ClusterName, "key", op.NewKey)
		}
		if err := secretsenc.SaveRecord(dir, rec); err != nil {
			return err
		}
	}
}

// restartedAll reports whether the applied plan pl wrote file as the
// secrets encryption configuration of every controlplane node and then
// started each one's kube-apiserver (created, replaced or restarted it):
// then every API server reads file already.
func restartedAll(pl *Planned, file []byte) bool {
	if pl.encryption == nil || !bytes.Equal(pl.encryption.file, file) || !pl.Complete() {
		return false
	}
	started := map[string]bool{}
	for _, st := range pl.Plan.Steps {
		if st.Component == desired.KubeAPIServer && (st.Action == plan.Create || st.Action == plan.Replace || st.Action == plan.Restart) {
			started[st.Node] = true
		}
	}
	for _, n := range pl.Desired.Nodes {
		if n.HasRole(spec.RoleControlPlane) && !started[n.Address] {
			return false
		}
	}
	return true
}

// restartAPIServers applies the configuration of the stage: a fresh plan
// (which writes the file where it differs) with a restart of every API
// server it does not restart already, carried out by the control-plane
// phase one node at a time with health checks. Every controlplane node
// must answer: a stage that misses one is not done.
func (s *Session) restartAPIServers(ctx context.Context, lk *Lock, ao ApplyOptions, op *secretsenc.Op) error {
	pl, err := s.Plan(ctx)
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	var down []string
	for _, a := range pl.Unreachable() {
		if dn, ok := pl.Desired.Node(a); ok && dn.HasRole(spec.RoleControlPlane) {
			down = append(down, a)
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("controlplane nodes %s did not answer: every API server must read the new configuration before the next stage; try again when they answer", strings.Join(down, ", "))
	}
	pl.Plan = plan.WithRestarts(pl.Plan, pl.Desired, pl.Observed, desired.KubeAPIServer,
		fmt.Sprintf("secrets encryption %s, stage %s: reads %s again", op.Kind, op.Stage, encryptionPath))
	if _, err := s.applyOnce(ctx, lk, pl, ao); err != nil {
		return err
	}
	return nil
}

// rewriteSecrets rewrites every Secret through the API server
// (secretsenc.RewriteSecrets).
func (s *Session) rewriteSecrets(ctx context.Context) (int, error) {
	set, err := s.PKI(ctx)
	if err != nil {
		return 0, err
	}
	cs, err := s.KubeClient(set, s.observeNodes(ctx))
	if err != nil {
		return 0, err
	}
	return secretsenc.RewriteSecrets(ctx, cs, func(n int) {
		s.opts.Log.Debug("rewriting Secrets", "cluster", s.c.ClusterName, "rewritten", n)
	})
}

// work reports whether applying does something about the key: save it or
// its record, or run an operation's stage.
func (r *resolvedEncryption) work() bool {
	return r != nil && (r.saveConfig || r.saveRecord || r.info.Op != nil)
}
