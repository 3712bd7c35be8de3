//go:build tools

// Package kubebuild pins the Kubernetes v1.37.2 commands that rigger sandbox
// builds into its hyperkube image rigger-sandbox/hyperkube:v1.37.2 (RKE's
// system_images.kubernetes: one image with every component in
// /usr/local/bin). The sandbox runs, in this directory, with CGO_ENABLED=0:
//
//	go build -trimpath -o $RIGGER_CACHE/kube/v1.37.2/ \
//	    k8s.io/kubernetes/cmd/kube-apiserver ...
//
// The version is the directory's name and go.mod's require; the staging
// replace lines follow k8s.io/kubernetes' own go.mod. A test in package
// sandbox checks that they agree with the sandbox's list of versions.
package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
