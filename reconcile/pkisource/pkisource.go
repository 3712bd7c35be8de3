// Package pkisource decides where a plan's certificates come from: the
// state directory's PKI (checked against the CA the nodes trust), the PKI
// a controlplane node holds when the state directory lost it, or a new CA
// when no node runs the cluster yet; completed for cluster.yml
// (pki.Ensure), and with the certificate rotation the plan carries out
// (package certrotate). Resolve is a pure function of what the state
// directory holds and what was observed of the nodes: reading both is the
// caller's (package reconcile).
package pkisource

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rigger/rigger/reconcile/certrotate"
	"github.com/rigger/rigger/reconcile/observe"
	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/reconcile/stall"
)

// Source says where a plan's certificates come from.
type Source struct {
	Kind Kind `json:"source"`
	// From is the state directory (StateDir) or the node (Recovered) they
	// were read from.
	From string `json:"from,omitempty"`
}

// Kind is where a plan's certificates come from.
type Kind string

const (
	// StateDir: the state directory's.
	StateDir Kind = "state-directory"
	// Recovered: read from a controlplane node, the state directory having
	// none (the apply saves them there first).
	Recovered Kind = "recovered"
	// New: a new CA, since no node runs the cluster yet. When some node did
	// not answer, the plan is blocked (NewCAError): it only shows what a
	// new CA would change.
	New Kind = "new"
)

// String says where the certificates come from, for people.
func (s Source) String() string {
	switch s.Kind {
	case StateDir:
		return "state directory " + s.From
	case Recovered:
		return "recovered from node " + s.From + " (the state directory had none)"
	case New:
		return "new (no node runs this cluster yet)"
	}
	return string(s.Kind)
}

// NewCAError is a cluster without certificates anywhere rigger could look
// while some of its nodes did not answer: they may hold the CA. A plan
// shows what a new CA would change; apply refuses to make one.
type NewCAError struct {
	StateDir    string
	Unreachable []string
}

func (e *NewCAError) Error() string {
	return fmt.Sprintf("the state directory %s has no certificates and nodes %s did not answer: "+
		"rigger makes a new CA only when every node answers and none runs this cluster; try again when they answer",
		e.StateDir, strings.Join(e.Unreachable, ", "))
}

// Input is what the state directory holds and what is asked.
type Input struct {
	StateDir string
	// Req is the certificates cluster.yml needs (pki.RequestFor).
	Req pki.Request
	// State is the state directory's PKI; nil when it has none.
	State *pki.Set
	// Rotation is the record of rotations; Old and New are the two
	// generations of a CA rotation under way (certrotate.OldDir, NewDir),
	// read when the record has one.
	Rotation certrotate.Record
	Old, New *pki.Set
	// Asked are the rotations cluster.yml (rotate_certificates) and the
	// command line (rigger cert rotate) ask for; nil: none.
	AskedYML, AskedCLI *pki.Rotation
	Now                time.Time
}

// Resolved is a plan's PKI and where it came from.
type Resolved struct {
	Set     *pki.Set
	Changes []pki.Change
	Source  Source
	// Save is set when the state directory must be written before apply,
	// with State: Set, but for a CA rotation (the old generation until it
	// is done).
	Save  bool
	State *pki.Set
	// NewCA, when set, says why the new CA must not be applied.
	NewCA error
	// Rotation is what the plan does about certificate rotation.
	Rotation *certrotate.Plan
}

// Resolve finds the cluster's PKI for a plan from in and the observed
// nodes o (whose Contents are read when in.State is nil): the state
// directory's, or, when that is lost, a controlplane node's. Only a
// cluster with no trace on any node gets a new CA. The PKI found is then
// completed (pki.Ensure), with the certificates of the rotation the plan
// starts reissued, or taken at the stage of the CA rotation under way.
func Resolve(in Input, o *observe.Cluster) (*Resolved, error) {
	r := &Resolved{Rotation: &certrotate.Plan{Record: in.Rotation, Decision: certrotate.Decide(in.Rotation, in.AskedYML, in.AskedCLI)}}
	if a := r.Rotation.Decision.Resume; a != nil && a.Rotation.CA {
		err := resumeCA(in, r, o)
		r.Rotation.Set = r.Set
		return r, err
	}
	existing := in.State
	switch {
	case existing != nil:
		r.Source = Source{Kind: StateDir, From: in.StateDir}
		if err := checkSameCA(in.StateDir, o, existing.Certs[pki.CACertName].CertPEM); err != nil {
			return nil, stall.Stalls(stall.StateDamaged, err)
		}
	default:
		var err error
		existing, r.Source, err = Recover(in.StateDir, o)
		var newCA *NewCAError
		switch {
		case errors.As(err, &newCA):
			// A plan may show what a new CA would change; Apply refuses.
			r.Source, r.NewCA = Source{Kind: New}, err
		case err != nil:
			return nil, err
		default:
			r.Save = true
		}
	}
	req := in.Req
	if d := r.Rotation.Decision; d.Issue != nil && existing != nil {
		req.Rotate = d.Issue
	}
	var err error
	if r.Set, r.Changes, err = pki.Ensure(existing, req, in.Now); err != nil {
		return nil, err
	}
	r.State, r.Save = r.Set, r.Save || len(r.Changes) > 0
	err = issue(in, r, existing)
	r.Rotation.Set = r.Set
	return r, err
}

// resumeCA is the PKI of a plan while a CA rotation is under way: both
// generations (in.Old, in.New) completed for cluster.yml (pki.Ensure), and
// the set of the rotation's stage (pki.Staged). The state directory's own
// PKI is the old generation until the rotation is done.
func resumeCA(in Input, r *Resolved, o *observe.Cluster) error {
	a := r.Rotation.Decision.Resume
	if in.Old == nil || in.New == nil {
		return stall.Stalls(stall.StateDamaged, fmt.Errorf("resume the CA rotation begun %s: the state directory %s lacks a generation of its certificates (%s, %s); "+
			"restore them from a backup: the nodes may run either generation of the CA", a.IssuedAt.Format(time.RFC3339), in.StateDir, certrotate.OldDir, certrotate.NewDir))
	}
	old, oc, err := pki.Ensure(in.Old, in.Req, in.Now)
	if err != nil {
		return err
	}
	rotated, rc, err := pki.Ensure(in.New, in.Req, in.Now)
	if err != nil {
		return err
	}
	var accepted [][]byte
	for _, st := range pki.CAStages {
		staged, err := pki.Staged(old, rotated, st)
		if err != nil {
			return err
		}
		accepted = append(accepted, staged.Trusted(pki.CACertName))
	}
	accepted = append(accepted, old.Certs[pki.CACertName].CertPEM)
	if err := checkSameCA(in.StateDir, o, accepted...); err != nil {
		return stall.Stalls(stall.StateDamaged, err)
	}
	if r.Set, err = pki.Staged(old, rotated, a.Stage); err != nil {
		return stall.Stalls(stall.StateDamaged, err)
	}
	rot := r.Rotation
	rot.Old, rot.Rotated, rot.Active = old, rotated, a
	rot.SaveGenerations = len(oc)+len(rc) > 0
	r.Changes = rc
	r.Source = Source{Kind: StateDir, From: in.StateDir}
	return nil
}

// issue completes r for the rotation the plan starts or goes on with,
// existing being the PKI it started from (nil for a new cluster).
func issue(in Input, r *Resolved, existing *pki.Set) error {
	rot := r.Rotation
	d := rot.Decision
	switch {
	case d.Resume != nil:
		rot.Active = d.Resume
	case d.Issue == nil:
	case existing == nil:
		rot.Fresh = true
	case d.Issue.CA:
		old, oc, err := pki.Ensure(existing, in.Req, in.Now)
		if err != nil {
			return err
		}
		rot.Old, rot.Rotated = old, r.Set
		rot.Active = &certrotate.Active{Rotation: *d.Issue, From: d.From, Names: r.Set.Names(), Stage: pki.CAStages[0]}
		if r.Set, err = pki.Staged(old, rot.Rotated, pki.CAStages[0]); err != nil {
			return err
		}
		// The state directory keeps the old generation until every node
		// has the new one; the new one is saved beside it.
		r.State, r.Save = old, r.Source.Kind == Recovered || len(oc) > 0
	default:
		rot.Active = &certrotate.Active{Rotation: *d.Issue, From: d.From, Names: d.Issue.Names(r.Set)}
	}
	return nil
}

// caPath is the CA certificate on every node, caKeyPath its key.
var caPath, caKeyPath = pki.NodePath(pki.CACertName)

// checkSameCA refuses a state directory whose CA is not the one the nodes
// trust: applying it would break every component's TLS. accepted are the
// contents kube-ca.pem may have on a node: the CA, and while the CA is
// rotated, the other generation and both together.
func checkSameCA(stateDir string, o *observe.Cluster, accepted ...[]byte) error {
	var want []string
	for _, b := range accepted {
		want = append(want, observe.FileHash(b))
	}
	for _, a := range addrs(o) {
		if got, ok := o.Nodes[a].Files[caPath]; ok && !slices.Contains(want, got) {
			return fmt.Errorf("the CA in state directory %s is not the CA of node %s (%s differs): "+
				"the state directory belongs to another cluster; give the right --state-dir, "+
				"or move this one away and rigger recovers the PKI from a controlplane node", stateDir, a, caPath)
		}
	}
	return nil
}

// Recover is the PKI of the first reachable controlplane node of o that
// has the CA key (read from its Contents); without one, the cluster must
// have no trace on any node to get a new PKI (a nil set, source New); with
// nodes unanswered, that is a *NewCAError.
func Recover(stateDir string, o *observe.Cluster) (*pki.Set, Source, error) {
	var tried []string
	for _, a := range CANodes(o) {
		set, err := pki.FromFiles(SSLFiles(o.Nodes[a]))
		if err == nil {
			return set, Source{Kind: Recovered, From: a}, nil
		}
		tried = append(tried, fmt.Sprintf("%s: %v", a, err))
	}
	var traces, unreachable []string
	for _, a := range addrs(o) {
		n := o.Nodes[a]
		switch {
		case !n.Reachable:
			unreachable = append(unreachable, a)
		case len(n.Containers) > 0 || n.Files[caPath] != "":
			traces = append(traces, a)
		}
	}
	if len(traces) > 0 || len(tried) > 0 {
		msg := fmt.Sprintf("the state directory %s has no certificates, and none could be recovered from the nodes", stateDir)
		if len(tried) > 0 {
			msg += " (" + strings.Join(tried, "; ") + ")"
		}
		return nil, Source{}, fmt.Errorf("%s, but nodes %s run this cluster: rigger will not make a new CA for an existing cluster; "+
			"restore the state directory, or bring a controlplane node with /etc/kubernetes/ssl back", msg, strings.Join(traces, ", "))
	}
	if len(unreachable) > 0 {
		return nil, Source{}, &NewCAError{StateDir: stateDir, Unreachable: unreachable}
	}
	return nil, Source{Kind: New}, nil
}

// CANodes are the reachable nodes that hold the CA's key (controlplane
// nodes), sorted: where the PKI can be read back from.
func CANodes(o *observe.Cluster) []string {
	var out []string
	for _, a := range addrs(o) {
		if n := o.Nodes[a]; n.Reachable && n.Files[caKeyPath] != "" {
			out = append(out, a)
		}
	}
	return out
}

// SSLFiles are the files of pki.NodeDir among the node's Contents, by
// path.
func SSLFiles(n *observe.Node) map[string][]byte {
	out := map[string][]byte{}
	for p, b := range n.Contents {
		if strings.HasPrefix(p, pki.NodeDir+"/") {
			out[p] = b
		}
	}
	return out
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
