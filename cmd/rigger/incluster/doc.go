// Package incluster tests rigger serve as it runs in a cluster: the image
// the Dockerfile builds, deploy/ applied with `kubectl apply -k` and an
// overlay, pods that follow a git repository and reconcile another cluster
// over SSH. Its only code is its test (RIGGER_E2E=1, as root).
package incluster
