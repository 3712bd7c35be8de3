// Package gitrepo is the git side of `rigger serve --repo URL`: it keeps a
// bare clone of the repository that holds the clusters' cluster.yml files,
// fetches a branch, finds every cluster.yml under a path at a commit, and
// commits a cluster's status.yml back and pushes it.
//
// There is no worktree. Files are read from the commit's tree, and a status
// commit is built from objects: the new blob, the trees above it up to a new
// root tree, and a commit whose parent is the branch head just fetched. So
// nothing on disk can be left half-written or dirty between runs, several
// clusters can be committed to without a checkout to share, and what rigger
// reads is exactly what the commit holds.
//
// rigger never force-pushes. A commit is pushed as `<hash>:refs/heads/<branch>`
// and the server accepts it only as a fast-forward of the head it was built
// on. When someone pushed first, the branch is fetched again and the one-file
// change is made again on the new head, with backoff, so a human's commit is
// never lost or overwritten.
//
// Secrets (a token, a password in the URL, an SSH key passphrase) are kept
// out of every error this package returns and out of the clone's config.
package gitrepo
