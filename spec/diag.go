package spec

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"strings"

	"github.com/rigger/rigger/internal/clip"
)

// Bounds on the diagnostics of one file, whatever the file holds.
const (
	// maxDiagnostics is how many diagnostics a file gets: the first in
	// file order, then one that counts the errors left out and one that
	// counts the warnings.
	maxDiagnostics = 100
	// maxShown bounds a key or value quoted in a diagnostic: a longer one
	// is shown by its beginning and "…".
	maxShown = 200
	// maxText bounds a diagnostic's summary and detail.
	maxText = 2048
)

// Severity says whether a Diagnostic stops rigger (error) or is advice (warning).
type Severity string

const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Pos is a position in a file, 1-based.
type Pos struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// Diagnostic is one problem found in a cluster.yml.
type Diagnostic struct {
	Severity Severity `json:"severity"`
	File     string   `json:"file,omitempty"`
	Line     int      `json:"line,omitempty"`
	Column   int      `json:"column,omitempty"`
	// Path is the field path, e.g. `nodes[1].role` or `services.kube-api.extra_args`.
	Path string `json:"path,omitempty"`
	// Summary is one line. Where RKE reports the same problem, the summary keeps RKE's words.
	Summary string `json:"summary"`
	// Detail says what to do about it.
	Detail string `json:"detail,omitempty"`
	// More, on the last diagnostics of a file with more than can be
	// shown, is how many of this severity were left out. Such a
	// diagnostic has no position.
	More int `json:"more,omitempty"`
}

// String formats d as `file:line:col: severity: path: summary`, with the
// detail indented on the next line.
func (d Diagnostic) String() string {
	var b strings.Builder
	if d.File != "" {
		b.WriteString(d.File)
		if d.Line > 0 {
			fmt.Fprintf(&b, ":%d", d.Line)
		}
		if d.Column > 0 {
			fmt.Fprintf(&b, ":%d", d.Column)
		}
		b.WriteString(": ")
	}
	b.WriteString(string(d.Severity))
	b.WriteString(": ")
	if d.Path != "" {
		b.WriteString(d.Path)
		b.WriteString(": ")
	}
	b.WriteString(d.Summary)
	if d.Detail != "" {
		b.WriteString("\n    ")
		b.WriteString(strings.ReplaceAll(d.Detail, "\n", "\n    "))
	}
	return b.String()
}

// Diagnostics is every problem found in one file, in file order.
type Diagnostics []Diagnostic

// HasErrors reports whether any diagnostic is an error.
func (ds Diagnostics) HasErrors() bool {
	return slices.ContainsFunc(ds, func(d Diagnostic) bool { return d.Severity == SeverityError })
}

// Count returns how many errors and warnings ds stands for, those left
// out (Diagnostic.More) included.
func (ds Diagnostics) Count() (errors, warnings int) {
	for _, d := range ds {
		n := max(d.More, 1)
		if d.Severity == SeverityError {
			errors += n
		} else {
			warnings += n
		}
	}
	return errors, warnings
}

// Err returns the errors among ds as one error, or nil when there are none.
func (ds Diagnostics) Err() error {
	if !ds.HasErrors() {
		return nil
	}
	return &InvalidError{Diagnostics: ds}
}

// compareDiagnostics orders diagnostics by position; those without a
// line come last.
func compareDiagnostics(a, b Diagnostic) int {
	la, lb := a.Line, b.Line
	if la == 0 {
		la = 1 << 30
	}
	if lb == 0 {
		lb = 1 << 30
	}
	return cmp.Or(cmp.Compare(la, lb), cmp.Compare(a.Column, b.Column),
		cmp.Compare(a.Path, b.Path), cmp.Compare(a.Summary, b.Summary), cmp.Compare(a.Detail, b.Detail))
}

// collector gathers the diagnostics of one file: it keeps the first
// maxDiagnostics in file order, whatever order they are found in, and
// counts the others, so that a file with a million mistakes costs no
// more memory than one with a hundred.
type collector struct {
	kept                     diagHeap
	moreErrors, moreWarnings int
}

// add records d, shortened to maxText.
func (c *collector) add(d Diagnostic) {
	d.Summary, d.Detail = clip.Ellipsis(d.Summary, maxText), clip.Ellipsis(d.Detail, maxText)
	switch {
	case len(c.kept) < maxDiagnostics:
		heap.Push(&c.kept, d)
		return
	case compareDiagnostics(d, c.kept[0]) < 0:
		// d comes before the last one kept, which is left out instead.
		d, c.kept[0] = c.kept[0], d
		heap.Fix(&c.kept, 0)
	}
	if d.Severity == SeverityError {
		c.moreErrors++
	} else {
		c.moreWarnings++
	}
}

// result returns the diagnostics kept in file order, then those that
// count the ones left out.
func (c *collector) result(file string) Diagnostics {
	if len(c.kept) == 0 {
		return nil
	}
	ds := Diagnostics(slices.Clone(c.kept))
	ds.sort()
	detail := fmt.Sprintf("Only the first %d problems are shown: fix them and check the file again.", maxDiagnostics)
	if c.moreErrors > 0 {
		ds = append(ds, Diagnostic{Severity: SeverityError, File: file, Summary: fmt.Sprintf("and %d more %s", c.moreErrors, plural(c.moreErrors, "error")),
			Detail: detail, More: c.moreErrors})
	}
	if c.moreWarnings > 0 {
		ds = append(ds, Diagnostic{Severity: SeverityWarning, File: file, Summary: fmt.Sprintf("and %d more %s", c.moreWarnings, plural(c.moreWarnings, "warning")),
			Detail: detail, More: c.moreWarnings})
	}
	return ds
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// diagHeap is a max-heap of diagnostics in file order: the last on top.
type diagHeap []Diagnostic

func (h diagHeap) Len() int           { return len(h) }
func (h diagHeap) Less(i, j int) bool { return compareDiagnostics(h[i], h[j]) > 0 }
func (h diagHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *diagHeap) Push(x any)        { *h = append(*h, x.(Diagnostic)) }
func (h *diagHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}

// sort orders ds by position; diagnostics without a line come last.
func (ds Diagnostics) sort() {
	slices.SortStableFunc(ds, compareDiagnostics)
}

// sprintf is fmt.Sprintf with every string argument clipped to
// maxShown, before it is formatted: a value of a megabyte, given by
// alias in a thousand places, costs a thousand short messages.
func sprintf(format string, args ...any) string {
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > maxShown {
			args[i] = clip.Ellipsis(s, maxShown)
		}
	}
	return fmt.Sprintf(format, args...)
}

// InvalidError is returned for a cluster.yml with errors.
type InvalidError struct {
	Diagnostics Diagnostics
}

func (e *InvalidError) Error() string {
	var errs []string
	for _, d := range e.Diagnostics {
		if d.Severity == SeverityError {
			errs = append(errs, d.String())
		}
	}
	if n, _ := e.Diagnostics.Count(); n > 1 {
		return fmt.Sprintf("%d errors:\n%s", n, strings.Join(errs, "\n"))
	}
	return strings.Join(errs, "\n")
}
