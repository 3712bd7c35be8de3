// Package spec is the cluster.yml schema: every key of RKE's cluster.yml with
// RKE's names and defaults, plus rigger's own additions (the `rigger:` block
// and a node's `transport`).
//
// Parse and Load decode strictly: an unknown or misspelled key, a value of the
// wrong type or a duplicated key is a Diagnostic that names the file, line,
// column and field path and, where it can, the key that was meant. Defaults are
// then applied and the cluster is validated as a whole; every problem is
// reported at once, before any connection to a node is made.
//
// The types carry no runtime state: they say what the user asked for, nothing
// about what was observed.
package spec
