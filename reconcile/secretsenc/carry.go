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
)

// Save writes to the state directory dir, before anything changes on the
// nodes, what the plan found or made: the record first (a stop before the
// key is saved leaves a rotation whose first stage makes the key again),
// then the key. It returns the record as saved: a rotation the plan starts
// gets its start time, now.
func (p *Plan) Save(dir string, now time.Time) (Record, error) {
	rec := p.Record
	if p.Starts {
		op := *rec.Op
		op.StartedAt = now.UTC()
		rec.Op = &op
	}
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
