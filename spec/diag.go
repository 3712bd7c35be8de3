package spec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
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

// Err returns the errors among ds as one error, or nil when there are none.
func (ds Diagnostics) Err() error {
	if !ds.HasErrors() {
		return nil
	}
	return &InvalidError{Diagnostics: ds}
}

// sort orders ds by position; diagnostics without a line come last.
func (ds Diagnostics) sort() {
	slices.SortStableFunc(ds, func(a, b Diagnostic) int {
		la, lb := a.Line, b.Line
		if la == 0 {
			la = 1 << 30
		}
		if lb == 0 {
			lb = 1 << 30
		}
		return cmp.Or(cmp.Compare(la, lb), cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.Path, b.Path), cmp.Compare(a.Summary, b.Summary))
	})
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
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Sprintf("%d errors:\n%s", len(errs), strings.Join(errs, "\n"))
}
