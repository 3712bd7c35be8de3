package agenttun

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
)

// notConnected is the error of reaching node n1 of ts, whose agent is
// not connected.
func notConnected(t *testing.T, ts *testServer) *NotConnectedError {
	t.Helper()
	ts.srv.cfg.ConnectWait = 50 * time.Millisecond
	_, err := ts.srv.Docker(ctxFor(t), "n1")
	var nc *NotConnectedError
	if !errors.As(err, &nc) {
		t.Fatalf("reach n1: %v, want a *NotConnectedError", err)
	}
	return nc
}

// TestJournalSaysWhereTheJoinStopped: a node whose agent is not connected
// is told where its join stopped, as the server saw it.
func TestJournalSaysWhereTheJoinStopped(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})

	if nc := notConnected(t, ts); len(nc.Journal) != 0 || !strings.Contains(nc.Next, "no agent has asked this server for anything") {
		t.Errorf("no agent yet: %v", nc)
	}

	// Join step 2 fails on the agent: the CA is not the one it expects.
	cfg := ts.agentConfig(t, "n1", n)
	cfg.CAChecksum = strings.Repeat("0", 64)
	var ce *ChecksumError
	if err := runAgent(t, cfg).wait(t); !errors.As(err, &ce) {
		t.Fatalf("agent with another checksum: %v", err)
	}
	nc := notConnected(t, ts)
	if len(nc.Journal) != 1 || nc.Journal[0].Step != StepCAFetched || !strings.Contains(nc.Next, "--ca-checksum is not this server's") ||
		!strings.Contains(nc.Error(), "the join as the server saw it: ") {
		t.Errorf("after a CA checksum mismatch: %v", nc)
	}

	// Join step 3: a token that is not valid (used, expired, unknown).
	cfg = ts.agentConfig(t, "n1", n)
	cfg.Token = "rgt_" + strings.Repeat("x", 40)
	if err := runAgent(t, cfg).wait(t); err == nil {
		t.Fatal("an agent with a bogus token joined")
	}
	if nc := notConnected(t, ts); !strings.Contains(nc.Next, "was refused (the join token is not valid") || !strings.Contains(nc.Next, "rigger agent command --node n1") ||
		!strings.Contains(nc.Next, "proved nothing") {
		t.Errorf("after a bad token: %s", nc.Next)
	}

	// Joined, tunnel up, then the agent stopped.
	cfg = ts.agentConfig(t, "n1", n)
	ra := runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "the agent connected", func() bool { return ts.connected("n1") })
	ra.stop()
	testwait.For(t, 30*time.Second, "the server saw the tunnel end", func() bool { return !ts.connected("n1") })
	nc = notConnected(t, ts)
	var steps []string
	for _, j := range nc.Journal {
		steps = append(steps, j.Step)
	}
	// The unproven steps (the CA fetched, a bad token's join) are one:
	// the newest.
	if got := strings.Join(steps, ", "); got != "CA fetched, certificate issued, tunnel up, tunnel lost" || !strings.Contains(nc.Next, "its tunnel was lost at") {
		t.Errorf("after the agent stopped: steps %s; %s", got, nc.Next)
	}

	// A join with a fresh state directory while the node's certificate
	// is valid waits for an operator.
	cfg = ts.agentConfig(t, "n1", n)
	runAgent(t, cfg)
	testwait.For(t, 30*time.Second, "the join refused", func() bool {
		j := ts.srv.Journal("n1")
		return len(j) > 0 && j[len(j)-1].Step == StepJoinRefused
	})
	if nc := notConnected(t, ts); !strings.Contains(nc.Next, "its last join was refused") || !strings.Contains(nc.Next, "rigger agent approve --node n1") {
		t.Errorf("a join waiting for approval: %s", nc.Next)
	}
}

// TestJournalBounded: a node's journal keeps its last steps, and steps
// repeated (an agent retrying, anyone fetching the CA in the node's name)
// are kept once.
func TestJournalBounded(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	for range 100 {
		ts.srv.note("n1", JoinStep{Step: StepCAFetched})
		ts.srv.note("n1", JoinStep{Step: StepJoinRefused, Detail: "waits for approval"})
	}
	if j := ts.srv.Journal("n1"); len(j) != 2 {
		t.Errorf("two steps repeated in turn 100 times: %d steps kept", len(j))
	}
	// Another refusal is news.
	ts.srv.note("n1", JoinStep{Step: StepJoinRefused, Detail: "the join token is not valid"})
	if j := ts.srv.Journal("n1"); len(j) != 3 {
		t.Errorf("a new refusal not kept: %v", j)
	}
	for i := range 2 * journalSize {
		ts.srv.note("n1", JoinStep{Step: fmt.Sprint("step ", i)})
	}
	j := ts.srv.Journal("n1")
	if len(j) != journalSize || j[len(j)-1].Step != fmt.Sprint("step ", 2*journalSize-1) {
		t.Errorf("journal %v", j)
	}
	ts.srv.note("n9", JoinStep{Step: StepCAFetched})
	if j := ts.srv.Journal("n9"); j != nil {
		t.Errorf("a node not declared has a journal: %v", j)
	}
}

func TestNextStep(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		journal []JoinStep
		cert    certState
		want    string
	}{
		{nil, certState{}, "does not run, or does not reach the server"},
		{nil, certState{Held: true, Issued: at}, "start the agent on the node (it needs no token)"},
		{nil, certState{Held: true, Expired: true, Expires: at}, "expired on 2026-11-29T10:00:00Z: issue a new token"},
		{[]JoinStep{{At: at, Step: StepCertIssued}}, certState{Held: true}, "opened no tunnel since (join step 4)"},
		{[]JoinStep{{At: at, Step: StepTunnelRefused, Detail: "the certificate of node n1 was replaced or revoked"}}, certState{Held: true}, "its last tunnel was refused (the certificate of node n1 was replaced"},
	} {
		if got := nextStep(tc.journal, tc.cert); !strings.Contains(got, tc.want) {
			t.Errorf("nextStep(%v, %+v) = %q, want %q", tc.journal, tc.cert, got, tc.want)
		}
	}
}
