//go:build tools

// Package kubectlbuild pins kubectl v1.32.13, which the in-cluster sandbox
// test (cmd/rigger/incluster) runs as a user would: `kubectl apply -k`.
// `make kubectl` builds it, with CGO_ENABLED=0, once:
//
//	go build -trimpath -o $RIGGER_CACHE/kubectl/kubectl-v1.32.13-<go.sum's hash> k8s.io/kubernetes/cmd/kubectl
//
// It is a module of its own, beside hack/kube-build, so that the sandbox's
// hyperkube images (and their cache) do not change with it.
package kubectlbuild

import _ "k8s.io/kubernetes/cmd/kubectl"
