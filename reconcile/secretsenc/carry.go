package secretsenc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/internal/crashpoint"
	"github.com/rigger/rigger/reconcile/desired"
	"github.com/rigger/rigger/reconcile/plan"
	"github.com/rigger/rigger/reconcile/staged"
	"github.com/rigger/rigger/reconcile/stall"
	"github.com/rigger/rigger/spec"
)

// Save writes to the state directory dir, before anything changes on the
// nodes, what the plan found or made: the record first (a stop before the
// key is saved leaves a rotation whose first stage makes the key again),
// then the key. It returns the record as saved: a rotation the plan starts
// gets its start time, now.
func (p *Plan) Save(dir string, now time.Time) (Record, error) {
	rec := p.Recorded(now)
	if p.SaveRecord || p.Starts {
		if err := SaveRecord(dir, rec); err != nil {
			return rec, err
		}
	}
	if p.SaveConfig {
		if err := Save(dir, p.Cur); err != nil {
			return rec, err
		}
	}
	if rec.Op != nil {
		crashpoint.Reach(crashpoint.EncryptionStageSaved)
	}
	return rec, nil
}

var _ staged.Operation = (*Plan)(nil)

// Title is the phase of the operation's stage the plan carries out; ""
// when none is under way.
func (p *Plan) Title() (plan.Phase, string) {
	if p == nil || p.Record.Op == nil {
		return "", ""
	}
	op := p.Record.Op
	return "secrets-encryption", fmt.Sprintf("Secrets encryption: %s, stage %s (keys %s)", op.Kind, op.Stage, strings.Join(p.Want.Names(), ", "))
}

// Restarts is, on a controlplane node, the encryption configuration when
// the API servers must read it again (Reload).
func (p *Plan) Restarts(n *desired.Node) map[string]string {
	if why := p.Reload(); why != "" && n.HasRole(spec.RoleControlPlane) {
		return map[string]string{path: why}
	}
	return nil
}

// Blocked refuses a new key while nodes that may hold the cluster's did
// not answer (NewKeyBlocked).
func (p *Plan) Blocked() error {
	if p != nil && p.NewKeyBlocked != nil {
		return stall.Stalls(stall.NewKeyBlocked, p.NewKeyBlocked)
	}
	return nil
}

// Next is the stage that follows the plan's (NextOp), for people; ""
// when none.
func (p *Plan) Next() string {
	op := p.NextOp()
	if op == nil {
		return ""
	}
	return fmt.Sprintf("secrets encryption %s, stage %s", op.Kind, op.Stage)
}

// Before saves the key and its record (Save); the After it returns ends
// the operation's stage (EndStage), with the controlplane nodes the plan
// could not reach: a stage is done when it ended without an error.
func (p *Plan) Before(s staged.Start) (staged.After, error) {
	if p.Starts {
		s.Log.Info("rotating the secrets encryption key", "new_key", p.Record.Op.NewKey, "keys", p.Want.Names())
	}
	rec, err := p.Save(s.Dir, s.Now)
	if err != nil {
		return nil, fmt.Errorf("save the secrets encryption key before applying: %w", err)
	}
	return func(ctx context.Context, e staged.End) (bool, error) {
		if rec.Op == nil {
			return false, nil
		}
		var down []string
		for _, a := range e.Unreachable {
			if dn, ok := e.Desired.Node(a); ok && dn.HasRole(spec.RoleControlPlane) {
				down = append(down, a)
			}
		}
		done, err := p.EndStage(ctx, StageEnd{Dir: e.Dir, Record: rec, Down: down, API: e.API, Now: e.Now,
			Say:      func(msg string, err error) { e.Say("secrets encryption", msg, err) },
			Progress: func(n int) { e.Log.Debug("rewriting Secrets", "rewritten", n) },
		})
		if err == nil && done.Op == nil && done.LastRotatedKey != "" && done.LastRotatedKey == p.Record.Op.NewKey {
			e.Log.Info("secrets encryption key rotated", "key", done.LastRotatedKey)
		}
		return err == nil, err
	}, nil
}

// Recorded is the record Save saves at now: the plan's, a rotation it
// starts with its start time.
func (p *Plan) Recorded(now time.Time) Record {
	rec := p.Record
	if p.Starts {
		op := *rec.Op
		op.StartedAt = now.UTC()
		rec.Op = &op
	}
	return rec
}

// StageEnd is what ending a plan's stage needs besides the plan: the record
// as Save saved it, the controlplane nodes that did not answer, the API
// server (for the rewrite) and where to say what was done.
type StageEnd struct {
	Dir    string
	Record Record
	// Down are the controlplane nodes the plan could not reach.
	Down []string
	// API is the API server's client; nil when it could not be reached.
	API kubernetes.Interface
	Now time.Time
	// Say reports progress; Progress the Secrets rewritten so far.
	Say      func(msg string, err error)
	Progress func(rewritten int)
}

// EndStage ends, once the plan's steps are carried out, the stage of the
// operation on the key the plan carried: a stage that changed the API
// servers' configuration is done when every controlplane node answered
// (the plan restarted each API server with it, one at a time with health
// checks); the rewrite stage rewrites every Secret through the API server
// now. The record then moves to the next stage, which the next plan
// carries out; the saved configuration drops a key only here, once no API
// server runs with it. It returns the record saved (the one given when the
// plan carries no stage).
func (p *Plan) EndStage(ctx context.Context, e StageEnd) (Record, error) {
	rec, op := e.Record, e.Record.Op
	if op == nil {
		return rec, nil
	}
	fail := func(err error) (Record, error) {
		e.Say(string(op.Stage), err)
		return rec, fmt.Errorf("secrets encryption %s, stage %s (it resumes there on the next apply): %w", op.Kind, op.Stage, err)
	}
	switch {
	case op.Stage.ChangesFile():
		if len(e.Down) > 0 {
			return fail(fmt.Errorf("controlplane nodes %s did not answer: every API server must read the new configuration before the next stage; try again when they answer", strings.Join(e.Down, ", ")))
		}
		e.Say("every API server reads "+path+" with keys "+strings.Join(p.Want.Names(), ", "), nil)
	case op.Stage == StageRewrite:
		if e.API == nil {
			return fail(errors.New("the API server could not be reached to rewrite the Secrets"))
		}
		n, err := RewriteSecrets(ctx, e.API, e.Progress)
		if err != nil {
			return fail(err)
		}
		e.Say(fmt.Sprintf("%d Secrets rewritten, encrypted with key %s", n, p.Want.Keys[0].Name), nil)
	}
	crashpoint.Reach(crashpoint.EncryptionStageDone)
	if !bytes.Equal(p.Want.Marshal(), p.Cur.Marshal()) {
		if err := Save(e.Dir, p.Want); err != nil {
			return rec, err
		}
	}
	if rec.Op = op.Next(); rec.Op == nil && op.Kind == KindRotate {
		rec.LastRotated, rec.LastRotatedKey = e.Now.UTC(), op.NewKey
	}
	return rec, SaveRecord(e.Dir, rec)
}
