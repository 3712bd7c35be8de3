package agenttun

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rigger/rigger/internal/testwait"
)

// TestTokenJoinsOneNodeOnce: a token printed for node a does not join
// node b, and joins a once.
func TestTokenJoinsOneNodeOnce(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "a", DockerSocket: n.docker.Socket}, Node{Name: "b", DockerSocket: n.docker.Socket})
	cfgA := ts.agentConfig(t, "a", n)

	asB := ts.agentConfig(t, "b", n)
	asB.Token = cfgA.Token
	err := runAgent(t, asB).wait(t)
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != codeBadToken {
		t.Fatalf("a's token used to join as b: %v, want a *RefusedError %s", err, codeBadToken)
	}
	if s, _ := ts.srv.store.nodeSerial("c1", "b"); s != "" {
		t.Fatal("node b holds a certificate issued for a's token")
	}

	ra := runAgent(t, cfgA)
	testwait.For(t, 30*time.Second, "a joined", func() bool { return ts.connected("a") })
	ra.stop()
	// a removed and declared again: it must join again, and its token
	// is spent.
	ts.srv.SetNodes([]Node{{Name: "b", DockerSocket: n.docker.Socket}})
	ts.srv.SetNodes([]Node{{Name: "a", DockerSocket: n.docker.Socket}, {Name: "b", DockerSocket: n.docker.Socket}})
	again := cfgA
	again.StateDir = t.TempDir()
	err = runAgent(t, again).wait(t)
	if !errors.As(err, &re) || re.Code != codeBadToken {
		t.Fatalf("a token used twice: %v, want a *RefusedError %s", err, codeBadToken)
	}
}

// TestJoinDoesNotReplaceAValidCertificate: a second join for a node that
// holds a valid certificate (someone else with a token for it) is refused
// and waits for an operator's approval; the node's own agent is not
// locked out. Once approved, that join replaces the certificate.
func TestJoinDoesNotReplaceAValidCertificate(t *testing.T) {
	n := startNode(t)
	ts := startServer(t, Node{Name: "n1", DockerSocket: n.docker.Socket})
	owner := ts.agentConfig(t, "n1", n)
	ra := runAgent(t, owner)
	testwait.For(t, 30*time.Second, "n1 joined", func() bool { return ts.connected("n1") })
	ra.stop()
	testwait.For(t, 30*time.Second, "n1's tunnel down", func() bool { return !ts.connected("n1") })
	serial, _ := ts.srv.store.nodeSerial("c1", "n1")

	other := ts.agentConfig(t, "n1", n) // a fresh token for n1, a fresh state directory
	other.Hostname = "elsewhere"
	ro := runAgent(t, other)
	testwait.For(t, 30*time.Second, "the second join pending approval", func() bool {
		p := ts.srv.Pending()
		return len(p) == 1 && p[0].Node == "n1" && p[0].Hostname == "elsewhere" && p[0].Key != ""
	})
	testwait.For(t, 30*time.Second, "the waiting agent's log says how to approve it", func() bool {
		return strings.Contains(ro.logs.String(), "rigger agent approve --node n1")
	})
	if got, _ := ts.srv.store.nodeSerial("c1", "n1"); got != serial {
		t.Fatalf("n1's certificate was replaced by a join (serial %s, was %s)", got, serial)
	}
	select {
	case <-ro.done:
		t.Fatalf("the waiting agent exited: %v", ro.err)
	default:
	}
	// The owner still connects with its certificate.
	ra = runAgent(t, owner)
	testwait.For(t, 30*time.Second, "the owner connected again", func() bool { return ts.connected("n1") })
	ra.stop()
	testwait.For(t, 30*time.Second, "n1's tunnel down", func() bool { return !ts.connected("n1") })

	// An operator approves the join (rigger agent approve).
	apps, err := ts.srv.store.Approvals("c1")
	if err != nil || len(apps) != 1 || apps[0].Hostname != "elsewhere" {
		t.Fatalf("Approvals = %+v, %v; want the join from elsewhere", apps, err)
	}
	if _, err := ts.srv.store.Approve("c1", "n1", apps[0].Key[:16]); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 30*time.Second, "the approved join connected", func() bool {
		a := ts.srv.Agents()
		return len(a) == 1 && a[0].Connected && a[0].Hostname == "elsewhere"
	})
	if len(ts.srv.Pending()) != 0 {
		t.Errorf("Pending = %+v after the approved join", ts.srv.Pending())
	}
	if apps, _ := ts.srv.store.Approvals("c1"); len(apps) != 0 {
		t.Errorf("Approvals = %+v after the approved join", apps)
	}
}

// TestPendingHostnameChecked: a host name no host has (5 KB) is refused
// before it reaches the pending list (and status.yml).
func TestPendingHostnameChecked(t *testing.T) {
	n := startNode(t)
	ts := startServer(t)
	cfg := ts.agentConfig(t, "n1", n)
	cfg.Hostname = strings.Repeat("h", 5000)
	err := runAgent(t, cfg).wait(t)
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != codeBadRequest || !strings.Contains(err.Error(), "host name") {
		t.Fatalf("join with a 5 KB host name: %v, want a *RefusedError %s about the host name", err, codeBadRequest)
	}
	if p := ts.srv.Pending(); len(p) != 0 {
		t.Errorf("Pending = %d entries, want none", len(p))
	}
	for i := range maxPending + 10 {
		ts.srv.notePending(PendingAgent{Node: strings.Repeat("n", 200) + string(rune('a'+i%26)) + strings.Repeat("x", i%50)})
	}
	if p := ts.srv.Pending(); len(p) > maxPending {
		t.Errorf("Pending = %d entries, more than %d", len(p), maxPending)
	}
}

// TestTokenLifetimeBounded: a token lives at most MaxTokenTTL, also one
// an older rigger wrote with a longer life; tokens past their life and
// joins no agent waits on any more are swept from the state directory.
func TestTokenLifetimeBounded(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	s, err := OpenStore(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.IssueToken("c1", "n1", 30*24*time.Hour, now); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("a token for 30 days: %v, want a refusal", err)
	}
	// As an older rigger wrote them: a year's life, and one expired.
	long := "rgt_" + strings.Repeat("l", 43)
	expired := "rgt_" + strings.Repeat("e", 43)
	for tok, rec := range map[string]TokenRecord{
		long:    {Cluster: "c1", Node: "n1", Created: now.Add(-time.Hour), Expires: now.Add(365 * 24 * time.Hour)},
		expired: {Cluster: "c1", Node: "n1", Created: now.Add(-48 * time.Hour), Expires: now.Add(-24 * time.Hour)},
	} {
		rec.SHA256 = hashToken(tok)
		b, _ := json.Marshal(rec)
		if err := os.MkdirAll(filepath.Join(dir, kindTokens), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeFile(filepath.Join(dir, filepath.FromSlash(tokenKey(tok))), b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.checkToken("c1", long, now); err == nil {
		t.Error("a token with a year's life was accepted")
	}
	// At the next sweep, joins waiting for approval: one asked an hour
	// and a half before, and no more; one asked a minute before.
	later := now.Add(2 * sweepInterval)
	for _, a := range []Approval{
		{Cluster: "c1", Node: "n1", Key: "old", Requested: later.Add(-90 * time.Minute)},
		{Cluster: "c1", Node: "n1", Key: "new", Requested: later.Add(-time.Minute)},
	} {
		b, _ := json.Marshal(a)
		os.MkdirAll(filepath.Join(dir, kindApprovals), 0o700)
		if err := writeFile(filepath.Join(dir, filepath.FromSlash(a.recordKey())), b); err != nil {
			t.Fatal(err)
		}
	}
	ok, err := s.IssueToken("c1", "n1", time.Hour, later)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := os.ReadDir(filepath.Join(dir, kindTokens))
	if len(tokens) != 1 {
		t.Errorf("%d token files left, want the new one alone", len(tokens))
	}
	if _, err := s.checkToken("c1", ok, later); err != nil {
		t.Errorf("the new token: %v", err)
	}
	approvals, err := s.Approvals("c1")
	if err != nil || len(approvals) != 1 || approvals[0].Key != "new" {
		t.Errorf("joins waiting after the sweep: %+v, %v; want the one asked a minute ago", approvals, err)
	}
}
