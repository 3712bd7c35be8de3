package agenttun

import (
	"errors"
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
	if ts.srv.store.nodeSerial("c1", "b") != "" {
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
	serial := ts.srv.store.nodeSerial("c1", "n1")

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
	if got := ts.srv.store.nodeSerial("c1", "n1"); got != serial {
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
