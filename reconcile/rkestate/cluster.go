package rkestate

import (
	"bytes"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// FullStateName is the name of the Secret (RKE ≥ 1.3) and of the ConfigMap
// (older RKE) in kube-system that hold RKE's full state, under the key of
// the same name: the JSON of cluster.rkestate.
const FullStateName = "full-cluster-state"

// FromCluster reads RKE's state from the cluster's API server, as RKE
// itself does (cluster.GetFullStateFromK8s): the full-cluster-state
// Secret, or the ConfigMap when there is no Secret. Reading a Secret of
// kube-system takes an administrator's credentials: RKE's
// kube_config_cluster.yml.
func FromCluster(ctx context.Context, k kubernetes.Interface) (*State, error) {
	sec, err := k.CoreV1().Secrets(metav1.NamespaceSystem).Get(ctx, FullStateName, metav1.GetOptions{})
	switch {
	case err == nil:
		source := "Secret kube-system/" + FullStateName
		b, ok := sec.Data[FullStateName]
		if !ok {
			return nil, fmt.Errorf("read %s: it has no key %s", source, FullStateName)
		}
		return Parse(source, bytes.NewReader(b))
	case !apierrors.IsNotFound(err):
		return nil, fmt.Errorf("read Secret kube-system/%s: %w", FullStateName, err)
	}
	cm, err := k.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, FullStateName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("the cluster has neither a Secret nor a ConfigMap kube-system/%s: RKE did not deploy it, or it was deleted; give --rkestate, or adopt from the nodes alone", FullStateName)
	}
	if err != nil {
		return nil, fmt.Errorf("read ConfigMap kube-system/%s: %w", FullStateName, err)
	}
	source := "ConfigMap kube-system/" + FullStateName
	s, ok := cm.Data[FullStateName]
	if !ok {
		return nil, fmt.Errorf("read %s: it has no key %s", source, FullStateName)
	}
	return Parse(source, bytes.NewReader([]byte(s)))
}

// FromKubeconfig reads RKE's state (FromCluster) through the API server
// the kubeconfig file names, with its credentials: RKE's
// kube_config_cluster.yml.
func FromKubeconfig(ctx context.Context, kubeconfig string) (*State, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig %s: %w", kubeconfig, err)
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for kubeconfig %s: %w", kubeconfig, err)
	}
	st, err := FromCluster(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("RKE's state through the API server of %s: %w", kubeconfig, err)
	}
	return st, nil
}
