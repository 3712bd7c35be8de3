package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/docker/docker/api/types"
	"github.com/rancher/rke/docker"
	"github.com/rancher/rke/metadata"
	"github.com/rancher/rke/util"
)

// checkDocker reads lines `kubernetes_version<TAB>Docker version` from in
// and writes, for each, what RKE's check of a node's Docker engine answers
// (hosts.checkDockerVersion, unexported, whose steps these are: the
// cluster's version read by util.StrToSemVer, its major.minor, then
// docker.IsSupportedDockerVersion with the engine's ServerVersion):
// `supported`, `unsupported` or `error`.
func checkDocker(in io.Reader, out io.Writer) error {
	if err := metadata.InitMetadata(context.Background()); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		k8s, dockerVersion, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			return fmt.Errorf("line %q: want kubernetes_version<TAB>Docker version", sc.Text())
		}
		answer := "error"
		if v, err := util.StrToSemVer(k8s); err == nil {
			ok, err := docker.IsSupportedDockerVersion(types.Info{ServerVersion: dockerVersion}, fmt.Sprintf("%d.%d", v.Major, v.Minor))
			switch {
			case err != nil:
			case ok:
				answer = "supported"
			default:
				answer = "unsupported"
			}
		}
		if _, err := fmt.Fprintln(out, answer); err != nil {
			return err
		}
	}
	return sc.Err()
}
