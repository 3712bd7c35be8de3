package addons

import (
	"fmt"
	"io"
	"strings"
)

// Action is what happens, or happened, to one object.
type Action string

const (
	// Create: the object is not in the cluster.
	Create Action = "create"
	// Configure: the object differs from the cluster's (a change in the
	// add-on, or drift).
	Configure Action = "configure"
	// Unchanged: applying the object changes nothing.
	Unchanged Action = "unchanged"
	// Prune: the object was removed from its add-on, or its add-on is
	// removed, and rigger deletes it.
	Prune Action = "prune"
	// Orphan: the object is in the add-on's inventory, no longer in the
	// add-on, and left in the cluster: pruning is off, or the object is no
	// longer rigger's (Change.Summary says which).
	Orphan Action = "orphan"
)

// symbol marks an action in Render's output, as terraform does.
func (a Action) symbol() string {
	switch a {
	case Create:
		return "+"
	case Configure:
		return "~"
	case Prune:
		return "-"
	case Orphan:
		return "!"
	}
	return "="
}

// Change is what happens, or happened, to one object of an add-on.
type Change struct {
	Object ObjectRef `json:"object"`
	Action Action    `json:"action"`
	// Summary is for people: for Configure what differs (values are never
	// shown for a Secret or a field that looks secret), for Orphan why the
	// object stays, for a Create that could not be dry-run why not.
	Summary string `json:"summary,omitempty"`
	// Fields are the paths that differ (Configure).
	Fields []string `json:"fields,omitempty"`
	// Source is where the object was read; empty for Prune and Orphan.
	Source string `json:"source,omitempty"`
}

// AddonChanges are the changes of one add-on.
type AddonChanges struct {
	Name string `json:"name"`
	// Removed: the whole add-on is removed (through its inventory).
	Removed bool     `json:"removed,omitempty"`
	Changes []Change `json:"changes"`
}

// Count is the number of changes with action a.
func (a AddonChanges) Count(act Action) int {
	n := 0
	for _, c := range a.Changes {
		if c.Action == act {
			n++
		}
	}
	return n
}

// Empty reports whether nothing changes: every object is Unchanged.
func (a AddonChanges) Empty() bool { return len(a.Changes) == a.Count(Unchanged) }

// Summary reads "6 objects applied (2 created, 1 configured, 3 unchanged),
// 1 pruned", or "removed: 3 pruned" for a removed add-on.
func (a AddonChanges) Summary() string {
	var b strings.Builder
	applied := a.Count(Create) + a.Count(Configure) + a.Count(Unchanged)
	if a.Removed {
		b.WriteString("removed")
	} else {
		fmt.Fprintf(&b, "%d object%s applied (%d created, %d configured, %d unchanged)",
			applied, plural(applied), a.Count(Create), a.Count(Configure), a.Count(Unchanged))
	}
	sep := ", "
	if a.Removed {
		sep = ": "
	}
	if n := a.Count(Prune); n > 0 || a.Removed {
		fmt.Fprintf(&b, "%s%d pruned", sep, n)
		sep = ", "
	}
	if n := a.Count(Orphan); n > 0 {
		fmt.Fprintf(&b, "%s%d left in the cluster", sep, n)
	}
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// ChangeSet is the changes of add-ons, in apply order: what Plan says
// applying them would do, or what Apply and Remove did. It is a value: it
// renders as text (Render) and as JSON (its fields' tags).
type ChangeSet struct {
	Addons []AddonChanges `json:"addons"`
}

// Count is the number of changes with action a over all add-ons.
func (c *ChangeSet) Count(a Action) int {
	n := 0
	for _, ac := range c.Addons {
		n += ac.Count(a)
	}
	return n
}

// Empty reports whether nothing changes.
func (c *ChangeSet) Empty() bool {
	for _, a := range c.Addons {
		if !a.Empty() || a.Removed {
			return false
		}
	}
	return true
}

// Render writes the changes as people read them: per add-on one line a
// change (unchanged objects are counted, not listed), then a summary line.
// Write errors are ignored, as with fmt.Fprintf to a terminal; render into
// a buffer to check them.
func (c *ChangeSet) Render(w io.Writer) {
	for _, a := range c.Addons {
		title := "addon " + a.Name
		if a.Removed {
			title += " (removed)"
		}
		fmt.Fprintf(w, "%s:\n", title)
		for _, ch := range a.Changes {
			if ch.Action == Unchanged {
				continue
			}
			line := fmt.Sprintf("  %s %s %s", ch.Action.symbol(), ch.Action, ch.Object)
			if ch.Summary != "" {
				line += " (" + ch.Summary + ")"
			}
			fmt.Fprintln(w, line)
		}
		if n := a.Count(Unchanged); n > 0 {
			fmt.Fprintf(w, "  = %d unchanged\n", n)
		}
		if len(a.Changes) == 0 {
			fmt.Fprintln(w, "  (no objects)")
		}
	}
	if c.Empty() {
		fmt.Fprintln(w, "No add-on changes.")
		return
	}
	fmt.Fprintf(w, "Add-ons: %d to create, %d to configure, %d to prune, %d unchanged",
		c.Count(Create), c.Count(Configure), c.Count(Prune), c.Count(Unchanged))
	if n := c.Count(Orphan); n > 0 {
		fmt.Fprintf(w, ", %d left in the cluster", n)
	}
	fmt.Fprintln(w, ".")
}

// oneLine joins a message's lines and runs of blanks.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
