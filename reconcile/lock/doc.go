// Package lock makes sure that one reconciler at a time changes a cluster.
//
// Two kinds of lock exist, both naming their Holder so that a refused
// reconciler can tell people who is in the way:
//
//   - File is an flock(2) lock on a local file, for `rigger apply` and for a
//     `rigger serve` that runs outside the cluster. A crashed holder
//     releases it automatically: the kernel drops the lock with the process.
//   - Lease and Elector use a coordination.k8s.io Lease in the cluster,
//     through client-go's leader election: Lease once around one apply,
//     Elector for the replicas of `rigger serve` (gitops/replicas: a
//     membership Lease per replica, a Lease per cluster). Lease takes over at once
//     the lease of a holder that crashed on the same machine (Machine.Gone);
//     one that crashed elsewhere is waited out for the lease's duration.
//
// Contention is reported as a *HeldError whatever the kind of lock.
package lock
