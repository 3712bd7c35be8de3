package agenttun

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// The join as the server saw it: each declared node keeps its last
// journalSize steps (CA fetched, join refused or certificate issued,
// tunnel refused, up or lost), so that a node whose agent is not connected
// can be told where its join stopped (NotConnectedError) without reading
// the agent's log. A step repeated is kept once, at its first time. Steps
// of nodes not declared are not kept: the pending list holds those.
//
// Two steps are unproven: the CA's fetch and a join whose token was
// refused name their node without a token or a certificate, so anyone can
// make them in any declared node's name. A journal keeps one unproven
// step, the newest, which says so wherever it is shown: they never pass
// for the node's own, nor push its proven steps out.
const journalSize = 8

// Join steps as the server sees them.
const (
	StepCAFetched     = "CA fetched"
	StepJoinRefused   = "join refused"
	StepCertIssued    = "certificate issued"
	StepTunnelRefused = "tunnel refused"
	StepTunnelUp      = "tunnel up"
	StepTunnelLost    = "tunnel lost"
)

// JoinStep is one step of a node's join as the server saw it.
type JoinStep struct {
	At               time.Time
	Step             string
	Remote, Hostname string
	// Detail is the refusal's message, or what ended the tunnel.
	Detail string
	// Unproven: the client only named the node (no token or certificate
	// proved it): it may be the node's agent, or anyone.
	Unproven bool
}

// unprovenText marks an unproven step wherever it is shown.
const unprovenText = "(unproven: a client that named the node, without a token or certificate)"

func (j JoinStep) String() string {
	s := j.At.UTC().Format(time.RFC3339) + " " + j.Step
	if j.Unproven {
		s += " " + unprovenText
	}
	if j.Remote != "" {
		s += " from " + j.Remote
	}
	if j.Detail != "" {
		s += ": " + j.Detail
	}
	return s
}

// note adds a step to the journal of node, if it is declared.
func (s *Server) note(node string, step JoinStep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nodes[node]; n != nil {
		s.noteLocked(n, step)
	}
}

// noteLocked adds a step to n's journal. A step like one of the last two
// is not added again: an agent retrying (its CA fetched, its join refused,
// again and again), or anyone fetching the CA in a node's name, does not
// push the other steps out, and the journal, which status shows, stays the
// same while nothing new happens (the first time is kept: since when it
// is so).
func (s *Server) noteLocked(n *nodeState, step JoinStep) {
	step.At = s.now()
	for _, j := range n.journal[max(0, len(n.journal)-2):] {
		if j.Step == step.Step && j.Detail == step.Detail && j.Unproven == step.Unproven {
			return
		}
	}
	if step.Unproven {
		// The newest unproven step replaces the one before.
		n.journal = slices.DeleteFunc(n.journal, func(j JoinStep) bool { return j.Unproven })
	}
	if len(n.journal) == journalSize {
		n.journal = append(n.journal[:0], n.journal[1:]...)
	}
	n.journal = append(n.journal, step)
}

// Journal is node's join as the server saw it, oldest first (nil for a
// node not declared).
func (s *Server) Journal(node string) []JoinStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.nodes[node]; n != nil {
		return append([]JoinStep(nil), n.journal...)
	}
	return nil
}

// certState is what the store says of a node's certificate, for
// messages.
type certState struct {
	Held, Expired   bool
	Issued, Expires time.Time
}

// certState is what the store says of node's certificate.
func (s *Server) certState(node string) certState {
	rec, valid, err := s.store.validCert(s.cluster, node, s.now())
	if err != nil || rec.Serial == "" {
		return certState{}
	}
	exp := rec.Expires
	if exp.IsZero() {
		exp = rec.Issued.Add(NodeValidity)
	}
	return certState{Held: true, Expired: !valid, Issued: rec.Issued, Expires: exp}
}

// nextStep says, from what the server saw of a node's join (journal, the
// node's certificate), where it stopped and what to do.
func nextStep(journal []JoinStep, cert certState) string {
	var last JoinStep
	if len(journal) > 0 {
		last = journal[len(journal)-1]
	}
	switch {
	case cert.Held && cert.Expired:
		return fmt.Sprintf("its certificate expired on %s: issue a new token for the node (rigger agent command --node) and run the agent's new line",
			cert.Expires.UTC().Format(time.RFC3339))
	case last.Step == StepJoinRefused && last.Unproven:
		return "the last join in its name, by a client that proved nothing (it may not be the node's agent), was refused (" + last.Detail + ")"
	case last.Step == StepJoinRefused:
		return "its last join was refused (" + last.Detail + ")"
	case last.Step == StepTunnelRefused:
		return "its last tunnel was refused (" + last.Detail + ")"
	case last.Step == StepTunnelLost:
		return "its tunnel was lost at " + last.At.UTC().Format(time.RFC3339) + ": the agent dials again by itself, with a backoff of up to a minute; if it does not, the host, its network or the agent stopped (docker ps -a on the node)"
	case last.Step == StepCAFetched:
		return "a client that named the node (unproven: it may not be the node's agent) fetched the CA (join step 2) at " + last.At.UTC().Format(time.RFC3339) + " and went no further: if it is the agent, most often its --ca-checksum is not this server's (the agent exits 1 saying so; rigger agent command prints the right one)"
	case last.Step == StepCertIssued:
		return "it joined at " + last.At.UTC().Format(time.RFC3339) + " but opened no tunnel since (join step 4): the agent's log says why"
	case cert.Held:
		return "it holds a certificate (issued " + cert.Issued.UTC().Format(time.RFC3339) + ") but no agent has connected since the server started: start the agent on the node (it needs no token) and check it reaches --server"
	}
	return "no agent has asked this server for anything for the node since the server started: it does not run, or does not reach the server (check --server, the network path to the tunnel endpoint, and the agent's first log lines: join steps 1 and 2)"
}

// journalText is the journal, newest last, for an error message.
func journalText(journal []JoinStep) string {
	var b strings.Builder
	for i, j := range journal {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(j.String())
	}
	return b.String()
}

// refusalLogInterval is how often the refused joins of a cluster are
// logged at most: made-up tokens by the thousand make a line a minute,
// with their count.
const refusalLogInterval = time.Minute

// sampledLog logs an event at once, then at most once an interval, with
// the count of the events since its last line: whoever can send requests
// cannot fill the log.
type sampledLog struct {
	log      *slog.Logger
	interval time.Duration
	msg      string

	mu      sync.Mutex
	last    time.Time   // of the last line
	count   int         // events not logged yet
	remote  string      // of the newest of them
	flush   *time.Timer // logs them at the end of the interval
	stopped bool
}

func newSampledLog(log *slog.Logger, interval time.Duration, msg string) *sampledLog {
	return &sampledLog{log: log, interval: interval, msg: msg}
}

// note records an event from remote.
func (l *sampledLog) note(remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count++
	l.remote = remote
	switch {
	case l.stopped, l.flush != nil: // the flush logs it
	case time.Since(l.last) >= l.interval:
		l.lineLocked()
	default:
		l.flush = time.AfterFunc(l.interval-time.Since(l.last), func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.flush = nil
			if l.count > 0 && !l.stopped {
				l.lineLocked()
			}
		})
	}
}

func (l *sampledLog) lineLocked() {
	args := []any{"count", l.count, "last_remote", l.remote}
	if !l.last.IsZero() {
		args = append(args, "since", l.last.UTC().Format(time.RFC3339))
	}
	l.log.Warn(l.msg, args...)
	l.last, l.count = time.Now(), 0
}

// stop logs what was not, and logs nothing more.
func (l *sampledLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.flush != nil {
		l.flush.Stop()
		l.flush = nil
	}
	if l.count > 0 && !l.stopped {
		l.lineLocked()
	}
	l.stopped = true
}
