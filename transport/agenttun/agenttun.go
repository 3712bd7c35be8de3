// Package agenttun reaches nodes that rigger cannot dial: the node runs
// `rigger agent`, which dials out to the tunnel server over one TLS
// WebSocket and carries, multiplexed on it with yamux, the streams the
// server opens to the node's Docker socket and to the node-local TCP ports
// it allows. Nothing else is reachable through an agent.
//
// Joining: the agent fetches the server's CA certificate (PathCACerts)
// without sending anything secret, checks that its SHA-256 (see Checksum)
// is the --ca-checksum it was given, and from then on trusts that CA alone.
// It then sends its join token, only to the verified server, with a
// certificate request (PathJoin); the server checks the token (issued for
// this cluster, not expired, kept hashed) and that the node is declared
// with the agent transport, and returns a client certificate naming the
// node. Every tunnel (PathConnect) is authenticated by that certificate
// alone: a node can open a tunnel for its own name only, only with the
// last certificate issued to it, and the newest tunnel of a node replaces
// the older one. docs/agent.md describes the flow and the security model.
//
// A *Server is the server side: an http.Handler to mount under a TLS
// listener that uses its TLSConfig, and a transport.Transport to the
// connected nodes. An *Agent is the node side.
package agenttun

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Paths the Server handles, relative to where it is mounted.
const (
	PathCACerts = "/cacerts"
	PathJoin    = "/v1/join"
	PathConnect = "/v1/connect"
)

// DefaultKeepaliveInterval is how often each side of a tunnel pings the
// other; a tunnel whose pings go unanswered is closed and the agent dials
// again.
const DefaultKeepaliveInterval = 15 * time.Second

// joinRequest is the body of a POST to PathJoin.
type joinRequest struct {
	Node string `json:"node"`
	CSR  string `json:"csr"` // PEM
	// Hostname is the agent's host name, for messages only.
	Hostname string `json:"hostname,omitempty"`
}

// joinResponse is the answer to an accepted join.
type joinResponse struct {
	Cert string `json:"cert"` // PEM
}

// Refusal codes the server answers with, so that the agent tells a refusal
// it must not retry from one it waits out.
const (
	codeBadToken    = "bad_token"    // 401: the agent exits
	codeBadRequest  = "bad_request"  // 400: the agent exits
	codeRevoked     = "revoked"      // 401: the node's certificate is not (or no longer) valid; the agent exits
	codeNotYourself = "not_yourself" // 403: the certificate names another node; the agent exits
	codePending     = "pending"      // 403: the node is not declared with transport: agent; the agent retries
	codeHeld        = "held"         // 409: another host holds the node's tunnel; the agent retries
	codeApproval    = "approval"     // 409: the node holds a valid certificate; the agent retries until an operator approves
	codeClosed      = "closed"       // 503: the server is shutting down; the agent retries
	codeUnavailable = "unavailable"  // 503: the server cannot read its records (its Backend) now; the agent retries
)

// refusal is the JSON body of every refused request.
type refusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// streamRequest opens every stream: what the server asks the agent to dial.
type streamRequest struct {
	Network string `json:"network"` // "tcp" or "unix"
	Addr    string `json:"addr"`
}

// streamReply answers a streamRequest; an empty Error means connected.
type streamReply struct {
	Error string `json:"error,omitempty"`
}

// maxFrame bounds a stream's request and reply.
const maxFrame = 4096

// writeFrame writes v as JSON after its length (2 bytes, big endian).
func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxFrame {
		return fmt.Errorf("frame of %d bytes is over the %d allowed", len(b), maxFrame)
	}
	buf := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(buf, uint16(len(b)))
	copy(buf[2:], b)
	_, err = w.Write(buf)
	return err
}

// readFrame reads what writeFrame wrote into v.
func readFrame(r io.Reader, v any) error {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if size > maxFrame {
		return fmt.Errorf("frame of %d bytes is over the %d allowed", size, maxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errors.New("malformed frame")
	}
	return nil
}
