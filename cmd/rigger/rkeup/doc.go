// Package rkeup tests rigger against a cluster that RKE's own `rke up`
// built: RKE v1.8.14 brings a cluster up on sandbox nodes, then a user's
// commands (rigger adopt, plan, apply, doctor) take it over. Its only code
// is its test (RIGGER_E2E=1, as root).
package rkeup
