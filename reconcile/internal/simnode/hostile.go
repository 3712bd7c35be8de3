package simnode

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Hostile is how a node's engine answers when whoever holds the node (a
// compromised node, or anything behind an agent's token) makes it answer
// to cost rigger memory: each way is one of the attacks rigger's memory
// bounds are measured against (docs/agent.md).
type Hostile string

// The ways a hostile engine answers.
const (
	// HostileNone answers as an engine does.
	HostileNone Hostile = ""
	// HostilePull has no image, and answers every pull with a message
	// that never ends on some, and with the progress of ever new layers,
	// without end, on the others.
	HostilePull Hostile = "pull"
	// HostileList answers the container list with 31 MiB of empty
	// containers: under a bound of 32 MiB an answer, hundreds of MB once
	// decoded.
	HostileList Hostile = "list"
	// HostileLabels answers the container list with one container of 31
	// MiB of labels.
	HostileLabels Hostile = "labels"
	// HostileVersion answers /version with 31 MiB of components.
	HostileVersion Hostile = "version"
)

// hostileSize is what a hostile answer that ends is: under the 32 MiB an
// answer that rigger used to take.
const hostileSize = 31 << 20

// SetHostile makes the engine answer as h says from now on.
func (e *Engine) SetHostile(h Hostile) { e.hostile.Store(&h) }

// answerHostile answers r as the engine's hostile way says, and reports
// whether it did; the path has no version prefix.
func (e *Engine) answerHostile(w http.ResponseWriter, r *http.Request) bool {
	h := e.hostile.Load()
	if h == nil || *h == HostileNone {
		return false
	}
	var body io.Reader
	switch p := r.URL.Path; {
	case *h == HostilePull && strings.HasPrefix(p, "/images/") && strings.HasSuffix(p, "/json"):
		apiError(w, http.StatusNotFound, "No such image")
		return true
	case *h == HostilePull && p == "/images/create":
		if e.requests.Load()%2 == 0 {
			body = io.MultiReader(strings.NewReader(`{"status":"`), &repeated{s: "a"})
		} else {
			body = &layers{}
		}
	case *h == HostileList && p == "/containers/json":
		body = io.MultiReader(strings.NewReader("["), io.LimitReader(&repeated{s: "{},"}, hostileSize), strings.NewReader("{}]"))
	case *h == HostileLabels && p == "/containers/json":
		body = io.MultiReader(strings.NewReader(`[{"Id":"x","Labels":{`), io.LimitReader(&labelSeq{}, hostileSize), strings.NewReader(`"x":""}}]`))
	case *h == HostileVersion && p == "/version":
		body = io.MultiReader(strings.NewReader(`{"Version":"26.1.5","ApiVersion":"1.45","Components":[`),
			io.LimitReader(&repeated{s: "{},"}, hostileSize), strings.NewReader(`{}]}`))
	default:
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.Copy(w, body)
	return true
}

// repeated reads as s, for ever.
type repeated struct {
	s   string
	off int
}

func (r *repeated) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.s[r.off:])
		n += c
		r.off = (r.off + c) % len(r.s)
	}
	return n, nil
}

// labelSeq reads as a JSON object's members "0":"","1":"",…, for ever.
type labelSeq struct {
	i   int
	buf bytes.Buffer
}

func (l *labelSeq) Read(p []byte) (int, error) {
	for l.buf.Len() < len(p) {
		fmt.Fprintf(&l.buf, `"%d":"",`, l.i)
		l.i++
	}
	return l.buf.Read(p)
}

// layers reads as a pull's progress of ever new layers, for ever.
type layers struct {
	i   int
	buf bytes.Buffer
}

func (l *layers) Read(p []byte) (int, error) {
	for l.buf.Len() < len(p) {
		fmt.Fprintf(&l.buf, `{"status":"Downloading","progressDetail":{"current":1,"total":2},"progress":"[>   ]","id":"%064d"}`+"\r\n", l.i)
		l.i++
	}
	return l.buf.Read(p)
}
