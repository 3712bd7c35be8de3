package transport

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// A node's Docker engine is not trusted to answer as an engine does: a
// compromised node, or anything behind an agent's tunnel, can answer any
// call with anything. What it answers is read through one layer, in the
// Docker client NewDockerClient makes, that bounds each answer by the
// class of its endpoint and draws what decoding it costs from the node's
// budget and from the pool every node of the process shares:
//
//   - version and ping: DockerMaxVersion bytes;
//   - inspects (a container, an image, the engine's info): DockerMaxInspect;
//   - lists (containers, images, networks, volumes): DockerMaxList bytes
//     and DockerMaxListEntries entries;
//   - every other answer that does not stream (a container created, a
//     wait's exit code, an error): DockerMaxSmall;
//   - progress streams (an image pulled or imported, events): one JSON
//     message a line, each at most DockerMaxMessage bytes, and at most
//     DockerMaxProgress bytes in all;
//   - raw streams (files, logs, attach): read as they come, and bounded by
//     their readers (dockerop keeps at most 32 MiB of files and 64 KiB of a
//     log).
//
// Bytes are not what an answer costs: decoded, `[{},{},…]` is a container
// summary of 500 bytes for every 3 bytes of JSON. So each JSON answer is
// weighed as it is read (answerWeigher): its bytes, its objects and its
// other values, at what the heaviest of each costs once decoded (measured
// on Docker's types; see answerWeigher). The weight of the answers a node
// has in flight is drawn from its budget (DockerNodeBudget) and from the
// process's AnswerPool, and given back when the answer is closed (its
// decoding done). An answer past its class's bounds fails with a
// *DockerAnswerTooLargeError, one past the budget or the pool with a
// *DockerBudgetError, one whose body does not come within
// DockerAnswerTimeout with a *DockerAnswerTimeoutError: each names the
// node and the call.

// Bounds of each class of answer.
const (
	DockerMaxHeader      = 1 << 20
	DockerMaxVersion     = 64 << 10
	DockerMaxInspect     = 1 << 20
	DockerMaxSmall       = 256 << 10
	DockerMaxList        = 8 << 20
	DockerMaxListEntries = 4096
	DockerMaxMessage     = 1 << 20
	DockerMaxProgress    = 64 << 20
)

// DockerNodeBudget is the weight (bytes of memory, as answerWeigher
// estimates them) that the JSON answers of one node may hold at once. The
// weight of an answer bounds what decoding it costs, whatever it holds, so
// it is several times what an engine's answers cost: the list of a
// thousand containers as Kubernetes runs them weighs 46 MiB, and costs 6
// MiB to decode (TestWeighingARealNode). A node with more than about
// 1,300 containers (docker ps -a) passes it.
const DockerNodeBudget = 64 << 20

// DefaultAnswerPool is the weight that the Docker answers of every node
// rigger serve reaches may hold at once (AnswerPool): however many nodes
// answer as they like, decoding their answers costs serve no more than
// that (its memory test: docs/agent.md), and some 5,000 containers as
// Kubernetes runs them are listed at once within it.
const DefaultAnswerPool = 256 << 20

// DockerAnswerTimeout bounds the time from an answer's headers to the end
// of its body, for the answers that do not stream (a wait's, which comes
// when its container exits, excepted): a node that starts an answer and
// stops does not keep its weight drawn from the pool.
const DockerAnswerTimeout = time.Minute

// AnswerPool is the weight that the Docker answers of many nodes may hold
// at once, shared by the Docker clients given it (NewDockerClient). It
// exists so that many nodes answering at once, each within its own budget,
// do not together take more of a process's memory than it has. It is safe
// for concurrent use.
type AnswerPool struct {
	sem  *semaphore.Weighted
	size int64
}

// NewAnswerPool returns a pool of size bytes of weight.
func NewAnswerPool(size int64) *AnswerPool {
	return &AnswerPool{sem: semaphore.NewWeighted(size), size: size}
}

// DockerAnswerTooLargeError is an answer past the bounds of its class.
type DockerAnswerTooLargeError struct {
	Node         string
	Method, Path string
	// Bound says which bound it passed: "64 KiB", "4096 entries", "1 MiB
	// in one message", "4 MiB of memory once decoded".
	Bound string
}

func (*DockerAnswerTooLargeError) TransportNodeError() {}

func (e *DockerAnswerTooLargeError) Error() string {
	return fmt.Sprintf("node %s: the Docker engine's answer to %s %s is over %s, more than rigger reads of any engine: "+
		"check the engine on the node (docker version, docker ps -a there): a compromised node answers so",
		e.Node, e.Method, e.Path, e.Bound)
}

// DockerBudgetError is an answer that would take the node past its budget
// (DockerNodeBudget), or every node's answers past the pool's size.
type DockerBudgetError struct {
	Node         string
	Method, Path string
	// Pool is true when the pool shared by every node was used up, false
	// when the node's own budget was.
	Pool  bool
	Limit int64
}

func (*DockerBudgetError) TransportNodeError() {}

func (e *DockerBudgetError) Error() string {
	if e.Pool {
		return fmt.Sprintf("node %s: the Docker answers that every node has in flight take the whole budget rigger keeps for them "+
			"(%d MiB of memory) (answering %s %s): other nodes answer with very large ones; rigger reaches this node again at its next reconcile",
			e.Node, e.Limit>>20, e.Method, e.Path)
	}
	return fmt.Sprintf("node %s: the Docker engine's answers in flight would take more than %d MiB of rigger's memory "+
		"(answering %s %s), more than any engine's do: check the engine on the node (docker ps -a there): a compromised node answers so",
		e.Node, e.Limit>>20, e.Method, e.Path)
}

// DockerAnswerTimeoutError is an answer whose body did not come within
// DockerAnswerTimeout of its headers.
type DockerAnswerTimeoutError struct {
	Node         string
	Method, Path string
	Timeout      time.Duration
}

func (*DockerAnswerTimeoutError) TransportNodeError() {}

func (e *DockerAnswerTimeoutError) Error() string {
	return fmt.Sprintf("node %s: the Docker engine began its answer to %s %s but did not finish it within %s: "+
		"check that dockerd on the node is healthy (systemctl status docker)", e.Node, e.Method, e.Path, e.Timeout)
}

// answerKind is how an answer is read.
type answerKind int

const (
	answerJSON     answerKind = iota // one value, bounded and weighed
	answerProgress                   // JSON messages, one a line
	answerRaw                        // read as it comes
)

// answerBound is the bounds of one class of answers.
type answerBound struct {
	kind      answerKind
	maxBytes  int64 // of the answer (answerJSON) or of all messages (answerProgress)
	maxWeight int64 // of the answer, or of one message
	maxItems  int   // entries of a list; 0: not a list
	// slow: the body may come long after the headers (a wait's).
	slow bool
}

// apiVersion is the version prefix of an API path.
var apiVersion = regexp.MustCompile(`^/v[0-9]+(\.[0-9]+)*`)

// listPaths are the API's lists.
var listPaths = map[string]bool{"/containers/json": true, "/images/json": true, "/networks": true, "/volumes": true,
	"/plugins": true, "/nodes": true, "/services": true, "/tasks": true, "/secrets": true, "/configs": true}

// boundOf is the class of the answer to method on path.
func boundOf(method, path string) answerBound {
	p := apiVersion.ReplaceAllString(path, "")
	end := p[strings.LastIndexByte(p, '/')+1:]
	switch {
	case p == "/_ping" || p == "/version":
		return answerBound{maxBytes: DockerMaxVersion, maxWeight: 4 << 20}
	case method == http.MethodGet && listPaths[p]:
		return answerBound{maxBytes: DockerMaxList, maxWeight: DockerNodeBudget, maxItems: DockerMaxListEntries}
	case p == "/images/create" || p == "/images/load" || p == "/events" || end == "push" || end == "build":
		return answerBound{kind: answerProgress, maxBytes: DockerMaxProgress, maxWeight: 8 << 20}
	case end == "archive" || end == "logs" || end == "attach" || end == "export" || end == "get" || end == "stats" ||
		end == "start" && strings.HasPrefix(p, "/exec/"):
		return answerBound{kind: answerRaw}
	case p == "/info" || end == "json":
		return answerBound{maxBytes: DockerMaxInspect, maxWeight: 16 << 20}
	case end == "wait":
		return answerBound{maxBytes: DockerMaxSmall, maxWeight: 4 << 20, slow: true}
	}
	return answerBound{maxBytes: DockerMaxSmall, maxWeight: 4 << 20}
}

// boundedAnswers reads every answer of one node's engine within its
// class's bounds, drawing its weight from the node's budget and the pool.
type boundedAnswers struct {
	next       http.RoundTripper
	node       string
	budget     *semaphore.Weighted // of budgetSize: DockerNodeBudget
	budgetSize int64
	pool       *AnswerPool   // nil: none
	timeout    time.Duration // DockerAnswerTimeout
}

func newBoundedAnswers(next http.RoundTripper, node string, pool *AnswerPool) *boundedAnswers {
	return &boundedAnswers{next: next, node: node, budget: semaphore.NewWeighted(DockerNodeBudget),
		budgetSize: DockerNodeBudget, pool: pool, timeout: DockerAnswerTimeout}
}

func (b *boundedAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	bound := boundOf(req.Method, req.URL.Path)
	if bound.kind == answerRaw {
		return resp, nil
	}
	rc := resp.Body
	body := &answerBody{rc: rc, b: b, bound: bound, method: req.Method, path: req.URL.Path}
	if bound.kind == answerJSON && !bound.slow {
		// Closing the body ends a Read waiting for more.
		body.timer = time.AfterFunc(b.timeout, func() {
			body.timedOut.Store(true)
			rc.Close()
		})
	}
	resp.Body = body
	return resp, nil
}

// answerBody reads an answer within its bounds.
type answerBody struct {
	rc           io.ReadCloser
	b            *boundedAnswers
	bound        answerBound
	method, path string
	timer        *time.Timer
	timedOut     atomic.Bool

	mu        sync.Mutex
	closed    bool
	read      int64 // bytes of the answer, or of the messages
	w         answerWeigher
	message   int64 // bytes of the current message (answerProgress)
	msgWeight int64 // weight of the current message
	held      int64 // weight drawn from the budget and the pool
	err       error // the bound passed, returned from then on
}

func (a *answerBody) Read(p []byte) (int, error) {
	a.mu.Lock()
	err := a.err
	a.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := a.rc.Read(p)
	if n > 0 {
		a.mu.Lock()
		berr := a.account(p[:n])
		if berr != nil {
			a.err = berr
		}
		a.mu.Unlock()
		if berr != nil {
			return 0, berr
		}
	}
	if err != nil && a.timedOut.Load() {
		a.err = &DockerAnswerTimeoutError{Node: a.b.node, Method: a.method, Path: a.path, Timeout: a.b.timeout}
		return n, a.err
	}
	return n, err
}

// account weighs p, the next bytes of the answer, and draws their weight.
func (a *answerBody) account(p []byte) error {
	a.read += int64(len(p))
	if a.read > a.bound.maxBytes {
		return a.tooLarge(sizeText(a.bound.maxBytes))
	}
	if a.bound.kind == answerProgress {
		return a.accountMessages(p)
	}
	w := a.w.weigh(p)
	if a.bound.maxItems > 0 && a.w.items > a.bound.maxItems {
		return a.tooLarge(fmt.Sprintf("%d entries", a.bound.maxItems))
	}
	if a.held+w > min(a.bound.maxWeight, a.b.budgetSize) {
		return a.tooLarge(sizeText(a.bound.maxWeight) + " of memory once decoded")
	}
	return a.draw(w)
}

// accountMessages weighs the messages of a progress stream: each at most
// DockerMaxMessage bytes and maxWeight; the stream holds the weight of
// its heaviest message, the most its reader decodes at once.
func (a *answerBody) accountMessages(p []byte) error {
	for len(p) > 0 {
		chunk := p
		nl := -1
		for i, c := range p {
			if c == '\n' {
				nl = i
				break
			}
		}
		if nl >= 0 {
			chunk = p[:nl+1]
		}
		p = p[len(chunk):]
		a.message += int64(len(chunk))
		a.msgWeight += a.w.weigh(chunk)
		if a.message > DockerMaxMessage {
			return a.tooLarge(sizeText(DockerMaxMessage) + " in one message")
		}
		if a.msgWeight > a.bound.maxWeight {
			return a.tooLarge(sizeText(a.bound.maxWeight) + " of memory in one message once decoded")
		}
		if more := a.msgWeight - a.held; more > 0 {
			if err := a.draw(more); err != nil {
				return err
			}
		}
		if nl >= 0 {
			a.message, a.msgWeight, a.w = 0, 0, answerWeigher{}
		}
	}
	return nil
}

// draw takes w from the node's budget and the pool. a.mu is held.
func (a *answerBody) draw(w int64) error {
	if w == 0 {
		return nil
	}
	if a.closed {
		return io.ErrClosedPipe
	}
	b := a.b
	if !b.budget.TryAcquire(w) {
		return &DockerBudgetError{Node: b.node, Method: a.method, Path: a.path, Limit: b.budgetSize}
	}
	if b.pool != nil && !b.pool.sem.TryAcquire(w) {
		b.budget.Release(w)
		return &DockerBudgetError{Node: b.node, Method: a.method, Path: a.path, Pool: true, Limit: b.pool.size}
	}
	a.held += w
	return nil
}

func (a *answerBody) tooLarge(bound string) error {
	return &DockerAnswerTooLargeError{Node: a.b.node, Method: a.method, Path: a.path, Bound: bound}
}

// Close gives back what the answer drew.
func (a *answerBody) Close() error {
	if a.timer != nil {
		a.timer.Stop()
	}
	err := a.rc.Close()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed && a.held > 0 {
		a.b.budget.Release(a.held)
		if a.b.pool != nil {
			a.b.pool.sem.Release(a.held)
		}
	}
	a.closed, a.held = true, 0
	return err
}

// sizeText is n bytes for a message: "64 KiB", "8 MiB".
func sizeText(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// Weights of answerWeigher: what the heaviest value of each kind costs
// once decoded by Docker's client, garbage of its growth included
// (measured with Go 1.26 on Docker's API types v28: an empty object as an
// element of a list of container summaries, 1,400 bytes; a value of a
// map, a string in a list, 50 to 120; a byte of a long string, 5: the
// decoder's buffer grows by doubling, and the string is copied).
const (
	weightPerByte   = 5
	weightPerObject = 1400
	weightPerValue  = 120
)

// answerWeigher follows a JSON text, split in any pieces, and weighs what
// decoding it costs: its bytes, its objects, and its other values (an
// array's, an object's member's), counted by the structural characters
// outside strings. It also counts the entries of the top-level array. It
// is not a parser: the decoder says whether the text is JSON; whatever the
// text, its weight bounds what a decoder can make of it.
type answerWeigher struct {
	inString, escaped bool
	depth             int
	topArray          bool // the text is an array
	entry             bool // an entry of the top-level array began
	items             int  // entries of the top-level array
}

// weigh returns the weight of p, the next piece of the text.
func (w *answerWeigher) weigh(p []byte) int64 {
	weight := int64(len(p)) * weightPerByte
	for _, c := range p {
		if w.inString {
			switch {
			case w.escaped:
				w.escaped = false
			case c == '\\':
				w.escaped = true
			case c == '"':
				w.inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '}', ']':
			w.depth--
			continue
		case ',':
			weight += weightPerValue
			if w.depth == 1 && w.topArray {
				w.entry = false
			}
			continue
		case ':':
			weight += weightPerValue
			continue
		}
		if w.depth == 1 && w.topArray && !w.entry {
			w.entry = true
			w.items++
		}
		switch c {
		case '"':
			w.inString = true
		case '{':
			weight += weightPerObject
			w.depth++
		case '[':
			weight += weightPerValue
			if w.depth == 0 {
				w.topArray = true
			}
			w.depth++
		}
	}
	return weight
}
