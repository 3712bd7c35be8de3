// Package etcdsnap takes, lists, deletes and restores a cluster's etcd
// snapshots, runs their schedule and retention, and carries out the
// one-shot restore request of cluster.yml.
//
// Every operation is a function over a Cluster value (the etcd nodes as
// cluster.yml describes them, the certificates, how to reach the nodes),
// which the reconcile session makes; nothing here reads cluster.yml or
// holds a connection of its own. The decisions are pure and table-tested:
// NextSnapshot (is one due?), Retain (which go), decideRestore (can this
// snapshot be restored, and from where? also one without a sidecar, from
// one node's copy checked by etcd's integrity hash).
//
// A snapshot is taken on one healthy member with etcdctl from the etcd
// image, verified (etcdctl snapshot status, size, sha256), kept under Dir
// on every etcd node with a JSON sidecar (Sidecar), and uploaded to S3 with
// its sidecar when backup_config.s3backupconfig is set. Names, the
// sidecar's format and the parsers of etcdctl's and sha256sum's output
// are here too.
package etcdsnap
