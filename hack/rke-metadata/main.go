// Command rke-metadata writes package spec/rkemeta from the metadata
// embedded in RKE (its data/data.json): the Kubernetes versions RKE knows
// from 1.24 on with their images, RKE's default version, version info,
// supported Docker versions, default service options and add-on templates.
//
// It runs as `go generate ./spec/rkemeta` (see the go:generate line in
// spec/rkemeta/rkemeta.go). RKE is found in the module cache, and
// downloaded through the module proxy when it is not there; -rke names a
// checkout instead. RKE is never a dependency of rigger's module.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/rigger/rigger/hack/rke-metadata/rkegen"
)

func main() {
	rke := flag.String("rke", "", "root of the "+rkegen.Module+" module (default: "+rkegen.Version+" from the module cache)")
	out := flag.String("out", ".", "directory of package rkemeta")
	flag.Parse()
	if err := run(*rke, *out); err != nil {
		fmt.Fprintln(os.Stderr, "rke-metadata:", err)
		os.Exit(1)
	}
}

func run(rke, out string) error {
	if rke == "" {
		dir, err := rkegen.LocateRKE()
		if err != nil {
			return err
		}
		rke = dir
	}
	raw, err := rkegen.ReadData(rke)
	if err != nil {
		return err
	}
	o, err := rkegen.Generate(raw)
	if err != nil {
		return err
	}
	files, err := o.Files()
	if err != nil {
		return err
	}
	return rkegen.Write(out, files)
}
