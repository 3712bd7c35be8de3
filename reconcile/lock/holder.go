package lock

import (
	"fmt"
	"os"
	"time"
)

// Holder says who holds a lock, for people. It is stored beside the lock (in
// the lock file, in an annotation of the Lease) so that whoever is refused
// can name the holder.
type Holder struct {
	// ID names the holder uniquely, e.g. "rigger serve on host1 (pid 42)".
	// It is also the holderIdentity of a Lease.
	ID string `json:"id"`
	// Host is the host name of the holder.
	Host string `json:"host"`
	// PID is the holder's process id on Host.
	PID int `json:"pid"`
	// Command is what the holder is doing: "serve", "apply",
	// "snapshot restore", ...
	Command string `json:"command"`
	// Since is when the holder took the lock (or started, as Me says).
	Since time.Time `json:"since"`
	// Boot, PIDNamespace and Start place the holder's process (see
	// Machine): with them, a rigger on the same machine tells a holder
	// that crashed from one that runs, even once its pid is reused. They
	// are empty in the records of older riggers, and when /proc could not
	// be read; such a holder is never taken for dead.
	Boot         string `json:"boot,omitempty"`
	PIDNamespace string `json:"pidNamespace,omitempty"`
	Start        uint64 `json:"start,omitempty"`
	// Address is where the holder answers HTTP (a replica of rigger
	// serve: its URL for the webhooks other replicas forward); empty
	// when it does not.
	Address string `json:"address,omitempty"`
	// AgentAddress is where a replica of rigger serve answers the others
	// on its agent tunnel endpoint (host:port), for the nodes' tunnels it
	// holds; empty when it has none.
	AgentAddress string `json:"agentAddress,omitempty"`
}

// Me returns the Holder for this process running command, from now on
// (the caller's clock).
func Me(command string, now time.Time) Holder {
	m := LocalMachine()
	pid := os.Getpid()
	start, err := m.Started(pid)
	if err != nil {
		start = 0 // not judged dead by anyone, only waited out
	}
	return Holder{
		ID:           fmt.Sprintf("rigger %s on %s (pid %d)", command, m.Host, pid),
		Host:         m.Host,
		PID:          pid,
		Command:      command,
		Since:        now.UTC().Truncate(time.Second),
		Boot:         m.Boot,
		PIDNamespace: m.PIDNamespace,
		Start:        start,
	}
}

// HeldError is returned when a lock is held by someone else. Its message
// says who holds it and what to do.
type HeldError struct {
	// Holder is who holds the lock, as far as it could be read.
	Holder Holder
	// Lock names the lock: a file path, or "lease namespace/name".
	Lock string
	// At is when the lock was found held (the refused one's clock); zero
	// when unknown.
	At time.Time
	// Expires is when a Lease is taken over if its holder stops renewing
	// it (the refused one's clock); zero for a lock file, which its
	// holder's crash releases at once.
	Expires time.Time
}

// Error says who holds the lock since when, and what to do next.
func (e *HeldError) Error() string {
	msg := fmt.Sprintf("%s is held by %s", e.Lock, e.Holder.ID)
	if !e.Holder.Since.IsZero() {
		msg += " since " + e.Holder.Since.UTC().Format(time.RFC3339)
		if !e.At.IsZero() {
			msg += fmt.Sprintf(" (%s ago)", max(e.At.Sub(e.Holder.Since).Round(time.Second), 0))
		}
	}
	msg += ": wait for it to finish (rigger apply --wait-lock), or stop it"
	if e.Holder.PID > 0 && e.Holder.Host != "" {
		msg += fmt.Sprintf(" (pid %d on %s)", e.Holder.PID, e.Holder.Host)
	}
	if e.Expires.IsZero() {
		return msg + "; a holder that crashed releases the lock by itself"
	}
	msg += "; a holder that crashed on this machine is taken over at once, one elsewhere once it has not renewed the lease"
	if !e.At.IsZero() {
		msg += fmt.Sprintf(" for its duration (at %s, in %s)", e.Expires.UTC().Format(time.RFC3339), max(e.Expires.Sub(e.At).Round(time.Second), 0))
	}
	return msg
}

// ParseHolder decodes a Holder as a lock file or a Lease's
// HolderAnnotation holds it.
func ParseHolder(b []byte) (Holder, error) { return parseHolder(b) }
