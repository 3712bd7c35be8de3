package plan

import (
	"encoding/json"

	"fmt"
	"github.com/rigger/rigger/reconcile/etcdmember"
	"github.com/rigger/rigger/reconcile/observe"
	"io"
	"slices"
	"strings"
)

// symbol marks an action in Render's output, as terraform does.
func symbol(a Action) string {
	switch a {
	case Create:
		return "+"
	case Replace:
		return "~"
	case Restart:
		return "↻"
	case Remove:
		return "-"
	case WriteFiles:
		return "*"
	case AddMember:
		return "+"
	case RemoveMember:
		return "-"
	}
	return "?"
}

// Render writes the plan as people read it: a Kubernetes upgrade's order
// first, when the plan has one, then the steps grouped by node (nodes
// of cluster.yml in plan order, then removed nodes), the unreachable nodes
// with their errors, and a summary line. Write errors are ignored, as with
// fmt.Fprintf to a terminal; render into a buffer to check them.
func (p *Plan) Render(w io.Writer) {
	if p.Upgrade != nil {
		fmt.Fprintf(w, "%s\n\n", p.Upgrade.Describe())
	}
	if s := p.DescribeWriteAgain(); s != "" {
		fmt.Fprintf(w, "%s\n\n", s)
	}
	if p.SnapshotEtcdLogs != nil {
		fmt.Fprintf(w, "%s\n\n", p.SnapshotEtcdLogs.Describe())
	}
	var nodes []string
	byNode := map[string][]Step{}
	for _, s := range p.Steps {
		if _, ok := byNode[s.Node]; !ok {
			nodes = append(nodes, s.Node)
		}
		byNode[s.Node] = append(byNode[s.Node], s)
	}
	for _, n := range nodes {
		title := n
		if slices.Contains(p.RemovedNodes, n) {
			title += " (removed from cluster.yml)"
		}
		fmt.Fprintf(w, "%s:\n", title)
		for _, s := range byNode[n] {
			fmt.Fprintf(w, "  %s %s %s (%s)\n", symbol(s.Action), s.Action, s.Component, s.Reason)
		}
		fmt.Fprintln(w)
	}
	if len(p.Unreachable) > 0 {
		fmt.Fprintln(w, "Unreachable:")
		for _, u := range p.Unreachable {
			note := "nothing planned for it"
			if u.Removed {
				note = "removed from cluster.yml; its containers are left until it answers"
			}
			fmt.Fprintf(w, "  ! %s: %s (%s)\n", u.Node, oneLine(u.Error), note)
		}
		fmt.Fprintln(w)
	}
	if len(p.Restarted) > 0 {
		fmt.Fprintln(w, "Started again since the last apply (not by rigger):")
		for _, r := range p.Restarted {
			fmt.Fprintf(w, "  ! %s\n", r)
		}
		fmt.Fprintln(w)
	}
	if p.Empty() && !p.blocked() {
		fmt.Fprintln(w, "No changes. The cluster matches cluster.yml.")
		return
	}
	files := ""
	if n := p.Count(WriteFiles); n > 0 {
		files = fmt.Sprintf(", files to write on %d node(s)", n)
	}
	if add, rm := p.Count(AddMember), p.Count(RemoveMember); add+rm > 0 {
		files += fmt.Sprintf(", etcd members to add %d and remove %d", add, rm)
	}
	fmt.Fprintf(w, "Plan: %d to create, %d to replace, %d to restart, %d to remove%s.\n",
		p.Count(Create), p.Count(Replace), p.Count(Restart), p.Count(Remove), files)
	if b := p.blockedCount(); b > 0 {
		fmt.Fprintf(w, "%d node(s) of cluster.yml could not be checked; run the plan again when they answer.\n", b)
	}
}

// blocked reports whether a node of cluster.yml was unreachable, so that
// the plan cannot say the cluster matches.
func (p *Plan) blocked() bool { return p.blockedCount() > 0 }

func (p *Plan) blockedCount() int {
	n := 0
	for _, u := range p.Unreachable {
		if !u.Removed {
			n++
		}
	}
	return n
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// containerRef is what the JSON of a step says about a container: enough to
// identify it, nothing that may hold a secret (no env, no spec).
type containerRef struct {
	ID       string `json:"id,omitempty"`
	Image    string `json:"image"`
	State    string `json:"state,omitempty"`
	SpecHash string `json:"spec_hash,omitempty"`
}

type stepJSON struct {
	Node      string        `json:"node"`
	Component string        `json:"component"`
	Action    Action        `json:"action"`
	Phase     Phase         `json:"phase"`
	Reason    string        `json:"reason"`
	Before    *containerRef `json:"before,omitempty"`
	After     *containerRef `json:"after,omitempty"`
	Files     []string      `json:"files,omitempty"`
	// Member is an etcd member step's member (no secret in it).
	Member *etcdmember.Member `json:"member,omitempty"`
}

// MarshalJSON encodes the step with a summary of Before and After (ID,
// image, state, spec hash): their env and spec labels may hold secrets.
func (s Step) MarshalJSON() ([]byte, error) {
	j := stepJSON{Node: s.Node, Component: s.Component, Action: s.Action, Phase: s.Phase, Reason: s.Reason, Files: s.Files, Member: s.Member}
	if b := s.Before; b != nil {
		j.Before = &containerRef{ID: b.ID, Image: b.Image, State: b.State, SpecHash: b.SpecHash}
	}
	if a := s.After; a != nil {
		j.After = &containerRef{Image: a.Image, SpecHash: a.Hash()}
	} else if s.AfterHash != "" {
		j.After = &containerRef{SpecHash: s.AfterHash}
	}
	return json.Marshal(j)
}

var _ json.Marshaler = Step{}

// UnmarshalJSON reads a step that MarshalJSON wrote, for Diff: Before is
// the summary that was saved, After is left nil and its spec hash kept.
func (s *Step) UnmarshalJSON(b []byte) error {
	var j stepJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*s = Step{Node: j.Node, Component: j.Component, Action: j.Action, Phase: j.Phase, Reason: j.Reason, Files: j.Files, Member: j.Member}
	if b := j.Before; b != nil {
		s.Before = &observe.Container{ID: b.ID, Name: j.Component, Image: b.Image, State: b.State, SpecHash: b.SpecHash}
	}
	if a := j.After; a != nil {
		s.AfterHash = a.SpecHash
	}
	return nil
}

// key is what Diff compares of a step: what it does, to which container,
// from which state to which spec.
func (s Step) key() string {
	after := s.AfterHash
	if s.After != nil {
		after = s.After.Hash()
	}
	before := ""
	if s.Before != nil {
		before = s.Before.ID + "@" + s.Before.SpecHash + "/" + s.Before.State
	}
	member := ""
	if s.Member != nil {
		member = fmt.Sprintf(" member %x %s", s.Member.ID, strings.Join(s.Member.PeerURLs, ","))
	}
	return fmt.Sprintf("%s %s %s %s → %s %s%s", s.Node, s.Action, s.Component, before, after, strings.Join(s.Files, ","), member)
}

// Diff says how two plans differ in what they do, one line a difference
// ("- " only in a, "+ " only in b), or "" when they do the same. Reasons
// and times do not count. It lets apply refuse a saved plan when the nodes
// changed since it was made.
func Diff(a, b *Plan) string {
	count := map[string]int{}
	for _, s := range a.Steps {
		count[s.key()]--
	}
	for _, s := range b.Steps {
		count[s.key()]++
	}
	var lines []string
	for k, n := range count {
		for ; n < 0; n++ {
			lines = append(lines, "- "+k)
		}
		for ; n > 0; n-- {
			lines = append(lines, "+ "+k)
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// maxSavedSize bounds a saved plan ReadSaved decodes; a plan of a
// thousand nodes is a few MiB.
const maxSavedSize = 64 << 20

// ReadSaved reads a plan that plan --out saved (MarshalJSON's form), at
// most maxSavedSize bytes of it.
func ReadSaved(r io.Reader) (*Plan, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSavedSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSavedSize {
		return nil, fmt.Errorf("larger than any plan (at most %d MiB): not a file rigger plan --out wrote", maxSavedSize>>20)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
