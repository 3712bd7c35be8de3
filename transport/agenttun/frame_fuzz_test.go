package agenttun

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/rigger/rigger/internal/fuzzcheck"
)

func frameBytes(body string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(body)))
	return append(b, body...)
}

// FuzzReadFrame feeds readFrame what the other end of a tunnel may send:
// the agent reads the server's stream requests, the server the agent's
// replies. It must not panic, must read no more than one frame (the
// stream's bytes follow it), and what it accepts reads back the same once
// written.
func FuzzReadFrame(f *testing.F) {
	f.Add(frameBytes(`{"network":"tcp","addr":"127.0.0.1:2379"}`))
	f.Add(frameBytes(`{"network":"unix","addr":"/var/run/docker.sock"}`))
	f.Add(frameBytes(`{"error":"dial tcp 127.0.0.1:1: connect: connection refused"}`))
	f.Add(append(frameBytes(`{}`), "stream bytes"...))
	f.Add([]byte{0xff, 0xff})
	f.Add([]byte{0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		var req streamRequest
		var err error
		fuzzcheck.Bounded(t, len(in), func() { err = readFrame(r, &req) })
		if read := len(in) - r.Len(); read > 2+maxFrame {
			t.Fatalf("readFrame read %d bytes, more than a frame", read)
		}
		if err != nil {
			return
		}
		if b, _ := json.Marshal(req); len(b) > maxFrame {
			return // escaping grew it past a frame: writeFrame refuses it, rightly
		}
		var out bytes.Buffer
		if err := writeFrame(&out, req); err != nil {
			t.Fatalf("writeFrame of what readFrame accepted: %v", err)
		}
		var again streamRequest
		if err := readFrame(&out, &again); err != nil || again != req {
			t.Fatalf("read back %+v, %v; want %+v", again, err, req)
		}
	})
}
