package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rancher/rke/cluster"
)

// rkeUpState does, for the cluster.yml at clusterFile, what `rke up` does
// with RKE's state, with RKE's own code: it parses and defaults the file
// (cluster.ParseConfig, cluster.InitClusterObject), builds a fresh state
// (cluster.RebuildState: pki.GenerateRKECerts, and the encryption provider
// file when secrets encryption is on), records it as the current state as
// a successful `rke up` does (UpdateClusterCurrentState) and writes it to
// stateFile with RKE's writer (FullState.WriteStateFile, mode 0600).
func rkeUpState(clusterFile, stateFile string) error {
	ctx := context.Background()
	text, err := os.ReadFile(clusterFile)
	if err != nil {
		return err
	}
	rkeConfig, err := cluster.ParseConfig(string(text))
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	// RKE keeps files beside cluster.yml: work in a directory of our own.
	work, err := os.MkdirTemp("", "rke-state-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	flags := cluster.ExternalFlags{ClusterFilePath: filepath.Join(work, "cluster.yml")}
	kc, err := cluster.InitClusterObject(ctx, rkeConfig, flags, "")
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	st, err := cluster.RebuildState(ctx, kc, &cluster.FullState{}, flags)
	if err != nil {
		return fmt.Errorf("rebuild state: %w", err)
	}
	// What UpdateClusterCurrentState records once rke up has deployed.
	st.CurrentState.RancherKubernetesEngineConfig = st.DesiredState.RancherKubernetesEngineConfig.DeepCopy()
	st.CurrentState.CertificatesBundle = st.DesiredState.CertificatesBundle
	st.CurrentState.EncryptionConfig = st.DesiredState.EncryptionConfig
	if err := st.WriteStateFile(ctx, stateFile); err != nil {
		return err
	}
	return nil
}
