package etcdmember

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoOtherVoter is HandOff's answer for a leader that no other healthy
// voting member could take over from.
var ErrNoOtherVoter = errors.New("no other healthy voting etcd member to lead")

// HandOff moves the leadership of the cluster off the member whose peer
// URL is peerURL, when it leads, to the healthy voting member that has
// applied the most of the log, and returns that member. It returns nil
// when the member does not lead. A member about to stop then costs the
// cluster no election: etcd hands its leadership off itself when it stops,
// but only once its clients' streams are closed, which it waits for up to
// its request timeout (5 s and twice the election timeout: 15 s with
// RKE's 5000 ms), the API servers' watches keeping them open.
func (c *Client) HandOff(ctx context.Context, peerURL string) (*Member, error) {
	members, err := c.Members(ctx)
	if err != nil {
		return nil, err
	}
	self := Find(members, peerURL)
	switch {
	case self == nil:
		return nil, fmt.Errorf("no etcd member has the peer URL %s", peerURL)
	case !self.Healthy:
		return nil, fmt.Errorf("etcd member %s does not answer: %s", self, self.Error)
	}
	st, err := c.statusOf(ctx, self.ClientURLs[0])
	if err != nil {
		return nil, fmt.Errorf("etcd member %s: %w", self, err)
	}
	if st.Leader != self.ID {
		return nil, nil
	}
	var to *Member
	for i, m := range members {
		if m.ID != self.ID && m.Healthy && !m.IsLearner && (to == nil || m.Applied > to.Applied) {
			to = &members[i]
		}
	}
	if to == nil {
		return nil, ErrNoOtherVoter
	}
	// Only the leader moves its leadership: the request goes to it alone.
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	cl, err := connect(ctx, []string{self.ClientURLs[0]}, c.tls, c.dial)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if _, err := cl.MoveLeader(ctx, to.ID); err != nil {
		return nil, fmt.Errorf("move the etcd leadership from %s to %s: %w", self, to, err)
	}
	return to, nil
}
