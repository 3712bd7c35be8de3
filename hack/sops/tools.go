//go:build tools

// Package sops pins the sops CLI (github.com/getsops/sops/v3's cmd/sops, the
// version go.mod requires) that rigger's tests encrypt cluster.yml files
// with, to check that rigger reads what sops writes. `make sops` builds it,
// in this directory, once into $RIGGER_CACHE/sops/ and hands its path to
// the tests in RIGGER_SOPS:
//
//	go build -trimpath -o $RIGGER_CACHE/sops/sops-<go.sum hash> github.com/getsops/sops/v3/cmd/sops
//
// It is a module of its own so that the CLI's dependencies stay out of
// rigger's go.mod.
package sops

import _ "github.com/getsops/sops/v3/cmd/sops"
