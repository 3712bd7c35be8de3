// Package gitops is the loop of `rigger serve`: it follows a branch of a
// git repository, treats every cluster.yml under a path as one cluster,
// and reconciles each with a worker of its own (reconcile.Session, at most
// Config.MaxConcurrent at once) when its content changes, at every drift
// check, when a retry is due and when the etcd snapshot schedule asks.
//
// After each reconcile the worker writes status.yml beside the cluster.yml
// (or on a status branch): the revision acted on, the Flux-style conditions
// Ready, Reconciling and Stalled, what the nodes run, etcd, snapshots,
// certificates and the drift repaired. It is committed only when its
// meaning changes (times of observation aside), signed with a trailer
// (TrailerKey), and never triggers a reconcile itself: a worker acts on
// the cluster.yml's blob, which a status commit does not change.
//
// A cluster.yml encrypted with SOPS is decrypted with Config.Decrypt
// (package spec/sopsfile, keys where the sops CLI takes them); one that
// cannot be decrypted stalls its cluster alone (ReasonDecryptionFailed).
//
// The subpackages are the git side (gitrepo), the webhook endpoint that
// asks for a fetch now (webhook), and the sharing of the clusters among
// the replicas of serve in a Kubernetes cluster, a Lease per cluster
// (replicas, Config.Share).
package gitops
