// Package sysaddons renders RKE's system add-ons for a cluster.yml: the
// network plugin (flannel, canal, calico, weave), cluster DNS (CoreDNS or
// kube-dns, with NodeLocal DNSCache), metrics-server and the ingress
// controller (ingress-nginx), exactly as RKE v1.8.14 renders them, so that
// a cluster rigger builds or adopts runs the add-ons RKE would deploy.
//
// Each add-on comes from RKE's own template for the cluster's
// kubernetes_version (spec/rkemeta holds RKE's templates and the version
// ranges that pick them), executed with the data RKE builds for it: the
// same keys, RKE's defaults for what cluster.yml leaves empty, RKE's reading
// of network.options, and the template functions RKE gives its templates.
// Add-ons are named as RKE names the resources of its add-on jobs
// (rke-network-plugin, rke-coredns-addon, ...) and returned in RKE's deploy
// order, as addons.Addon values for the add-ons engine
// (reconcile/addons), each object knowing the template document it came
// from.
//
// Render is a pure function of the cluster: it does no I/O and keeps no
// state. Where rigger departs from RKE on purpose (an option RKE would
// silently ignore or fail on), the code and docs/addons.md say so.
// hack/rke-render renders the same clusters with RKE's own code;
// TestEquivalentToRKE compares the two.
package sysaddons
