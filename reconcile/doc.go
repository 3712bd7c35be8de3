// Package reconcile makes a cluster converge to its cluster.yml: it observes
// the nodes through a transport, computes a plan, and applies it. This first
// part connects the cluster.yml to the transports.
package reconcile
