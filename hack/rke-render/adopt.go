package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/docker/docker/api/types"
	"github.com/rancher/rke/cluster"
	"github.com/rancher/rke/hosts"
	"github.com/rancher/rke/pki"
	v3 "github.com/rancher/rke/types"
	"sigs.k8s.io/yaml"
)

// rkeUpState does, for the cluster.yml at clusterFile, what `rke up` does
// with RKE's state, with RKE's own code: it parses and defaults the file
// (cluster.ParseConfig, cluster.InitClusterObject), builds a fresh state
// (cluster.RebuildState: pki.GenerateRKECerts, and the encryption provider
// file when secrets encryption is on), records it as the current state as
// a successful `rke up` does (UpdateClusterCurrentState) and writes it to
// stateFile with RKE's writer (FullState.WriteStateFile, mode 0600).
//
// With plansFile set, it writes RKE's node plans too, as JSON
// (cluster.GeneratePlan: each node's processes, by container name, with
// image, command, args, env, binds, network mode, pid mode, privileged,
// restart policy, health check), for Linux nodes on amd64 (Docker root
// /var/lib/docker) whose etcd
// members start as a new cluster.
//
// With filesFile set, it writes, as JSON by node address and path, the
// files RKE's cert-deployer writes to each node
// (pki.DeployCertificatesOnPlaneHost: the node's certificates as
// pki.GenerateRKENodeCerts picks them, the CA's key only on controlplane
// nodes, and the kubeconfigs of those that have one), and the audit policy
// RKE's file deployer writes to controlplane nodes.
func rkeUpState(clusterFile, stateFile, plansFile, filesFile string) error {
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
	if filesFile != "" {
		files := map[string]map[string]string{}
		for _, h := range kc.Nodes {
			out := map[string]string{}
			bundle := pki.GenerateRKENodeCerts(ctx, kc.RancherKubernetesEngineConfig, h.Address, st.CurrentState.CertificatesBundle)
			for name, c := range bundle {
				if c.CertificatePEM == "" {
					continue // a name the node's roles call for that RKE did not make: nothing deployed
				}
				out[c.Path] = c.CertificatePEM
				if c.KeyPEM != "" && (name != pki.CACertName || slices.Contains(h.Role, "controlplane")) {
					out[c.KeyPath] = c.KeyPEM
				}
				if c.Config != "" && c.ConfigEnvName != "" {
					out[c.ConfigPath] = c.Config
				}
			}
			// What RKE's file deployer writes to controlplane nodes beside
			// them (cluster/hosts.go): the secrets encryption provider file
			// when encryption is on (deployEncryptionProviderFile), and the
			// audit policy when the audit log is on.
			if ec := st.CurrentState.EncryptionConfig; ec != "" && slices.Contains(h.Role, "controlplane") {
				out[cluster.EncryptionProviderFilePath] = ec
			}
			api := kc.Services.KubeAPI
			if _, set := api.ExtraArgs["audit-policy-file"]; !set && slices.Contains(h.Role, "controlplane") &&
				api.AuditLog != nil && api.AuditLog.Enabled && api.AuditLog.Configuration != nil {
				b, err := yaml.Marshal(api.AuditLog.Configuration.Policy)
				if err != nil {
					return err
				}
				out[cluster.DefaultKubeAPIArgAuditPolicyFileValue] = string(b)
			}
			files[h.Address] = out
		}
		if err := writeJSONFile(filesFile, files); err != nil {
			return err
		}
	}
	if plansFile == "" {
		return nil
	}
	infos := map[string]types.Info{}
	for _, n := range kc.Nodes {
		infos[n.Address] = types.Info{OSType: "linux", Architecture: "x86_64", DockerRootDir: "/var/lib/docker"}
	}
	// What cluster.GeneratePlan does, on the cluster object rke up plans
	// with: its encryption provider file is the state's (cmd/common.go),
	// which GeneratePlan's fresh object lacks, and with it the API server's
	// --encryption-provider-config.
	kc.EncryptionConfig.EncryptionProviderFile = st.DesiredState.EncryptionConfig
	plan := v3.RKEPlan{}
	for _, host := range hosts.GetUniqueHostList(kc.EtcdHosts, kc.ControlPlaneHosts, kc.WorkerHosts) {
		host.DockerInfo = infos[host.Address]
		svcOptions, err := kc.GetKubernetesServicesOptions(host.DockerInfo.OSType, cluster.GetServiceOptionData(map[string]interface{}{}))
		if err != nil {
			return fmt.Errorf("generate plan: %w", err)
		}
		plan.Nodes = append(plan.Nodes, cluster.BuildRKEConfigNodePlan(ctx, kc, host, svcOptions))
	}
	return writeJSONFile(plansFile, plan)
}
