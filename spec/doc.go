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
// A file encrypted with SOPS (a top-level `sops:` mapping with its `mac`) is
// read through the Decrypter of LoadWith's and ParseWith's Options, which puts
// the plain values into the nodes of the encrypted file: diagnostics name its
// lines, and a warning names the fields rigger shows whose values were
// encrypted. Package spec/sopsfile provides the Decrypter, so that spec never
// links the SOPS library; without one such a file is an error.
//
// The types carry no runtime state: they say what the user asked for, nothing
// about what was observed.
package spec
