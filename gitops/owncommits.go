package gitops

import (
	"sync"

	"github.com/rigger/rigger/gitops/gitrepo"
)

// rememberedCommits is how many of its own commits serve remembers for
// OwnCommit (the oldest is forgotten first): more than the status commits
// of many clusters in the time a forge takes to deliver their pushes.
const rememberedCommits = 2048

// OwnCommit reports whether hash is one of the last commits serve made
// and pushed (status.yml): the webhook answers a push of one without a
// fetch and without spending the rate budget of people's pushes.
func (s *Server) OwnCommit(hash string) bool { return hash != "" && s.own.has(hash) }

// commitSet is a bounded set of commit hashes.
type commitSet struct {
	mu     sync.Mutex
	hashes map[string]struct{}
	ring   []string
	next   int
}

func newCommitSet(n int) *commitSet {
	return &commitSet{hashes: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add records hash, forgetting the oldest when full.
func (c *commitSet) add(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.hashes[hash]; ok {
		return
	}
	if old := c.ring[c.next]; old != "" {
		delete(c.hashes, old)
	}
	c.ring[c.next] = hash
	c.hashes[hash] = struct{}{}
	c.next = (c.next + 1) % len(c.ring)
}

func (c *commitSet) has(hash string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.hashes[hash]
	return ok
}

// IsStatusMessage reports whether a commit message is one of rigger's
// status commits': it carries the TrailerKey trailer.
func IsStatusMessage(message string) bool { return gitrepo.IsRiggerCommit(message, TrailerKey) }
