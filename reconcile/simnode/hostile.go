package simnode

import (
	"io"
	"net/http"
	"strings"

	"github.com/rigger/rigger/internal/flood"
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
			body = io.MultiReader(strings.NewReader(`{"status":"`), flood.Repeat("a"))
		} else {
			body = flood.Sequence(`{"status":"Downloading","progressDetail":{"current":1,"total":2},"progress":"[>   ]","id":"%064d"}` + "\r\n")
		}
	case *h == HostileList && p == "/containers/json":
		body = io.MultiReader(strings.NewReader("["), io.LimitReader(flood.Repeat("{},"), hostileSize), strings.NewReader("{}]"))
	case *h == HostileLabels && p == "/containers/json":
		body = io.MultiReader(strings.NewReader(`[{"Id":"x","Labels":{`), io.LimitReader(flood.Sequence(`"%08d":"",`), hostileSize/14*14), strings.NewReader(`"x":""}}]`))
	case *h == HostileVersion && p == "/version":
		body = io.MultiReader(strings.NewReader(`{"Version":"26.1.5","ApiVersion":"1.45","Components":[`),
			io.LimitReader(flood.Repeat("{},"), hostileSize), strings.NewReader(`{}]}`))
	default:
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.Copy(w, body)
	return true
}
