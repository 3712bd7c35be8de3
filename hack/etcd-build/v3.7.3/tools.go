//go:build tools

// Package etcdbuild pins the etcd v3.7.3 commands that rigger sandbox builds
// into its image rigger-sandbox/etcd:v3.7.3 (RKE's system_images.etcd). The
// sandbox runs, in this directory, with CGO_ENABLED=0:
//
//	go build -trimpath -o $RIGGER_CACHE/etcd/v3.7.3/etcd go.etcd.io/etcd/server/v3
//
// and the same for etcdctl and etcdutl. The version is the directory's name
// and go.mod's requires; a test in package sandbox checks that they agree
// with the sandbox's list of versions.
package etcdbuild

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
