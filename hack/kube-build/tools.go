//go:build tools

// Package kubebuild pins the Kubernetes commands that rigger sandbox builds
// into its hyperkube image (RKE's system_images.kubernetes: one image with
// every component in /usr/local/bin). The sandbox runs, with CGO_ENABLED=0:
//
//	go build -trimpath -o $RIGGER_CACHE/kube/v1.31.4/ \
//	    k8s.io/kubernetes/cmd/kube-apiserver ... ./pause
//
// Change the version here, in go.mod (require and the staging replace lines,
// which follow k8s.io/kubernetes' own go.mod) and in sandbox.KubernetesVersion
// together; a test in package sandbox checks that they agree.
package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
