package kubenode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/rigger/rigger/reconcile/pki"
	"github.com/rigger/rigger/spec"
)

// The Secret that holds a copy of the cluster's state, as RKE's
// kube-system/full-cluster-state: what rigger needs to take the cluster
// over again when both the state directory and the controlplane nodes'
// /etc/kubernetes/ssl are lost.
const (
	StateNamespace = "kube-system"
	StateSecret    = "rigger-cluster-state"
	// StateKey is the Secret's key of the cluster (ClusterState, JSON);
	// the other keys are the PKI's files, kube-ca.pem, kube-ca-key.pem, …
	StateKey = "cluster.json"
)

// ClusterState is the part of cluster.yml the Secret keeps: no SSH key,
// no password, no secret of any kind.
type ClusterState struct {
	ClusterName       string      `json:"cluster_name"`
	KubernetesVersion string      `json:"kubernetes_version"`
	Nodes             []StateNode `json:"nodes"`
}

// StateNode is a node of cluster.yml without its SSH credentials.
type StateNode struct {
	Address          string            `json:"address"`
	InternalAddress  string            `json:"internal_address,omitempty"`
	HostnameOverride string            `json:"hostname_override,omitempty"`
	Port             string            `json:"port,omitempty"`
	User             string            `json:"user,omitempty"`
	Role             []string          `json:"role"`
	Labels           map[string]string `json:"labels,omitempty"`
	Taints           []spec.Taint      `json:"taints,omitempty"`
}

// StateOf is what SaveState keeps of c.
func StateOf(c *spec.Cluster) *ClusterState {
	st := &ClusterState{ClusterName: c.ClusterName, KubernetesVersion: c.KubernetesVersion}
	for _, n := range c.Nodes {
		st.Nodes = append(st.Nodes, StateNode{
			Address: n.Address, InternalAddress: n.InternalAddress, HostnameOverride: n.HostnameOverride,
			Port: n.Port, User: n.User, Role: slices.Clone(n.Role), Labels: maps.Clone(n.Labels), Taints: slices.Clone(n.Taints),
		})
	}
	return st
}

// stateData is the Secret's data: StateKey and the PKI's files by base
// name (kube-ca.pem, kube-ca-key.pem, …).
func stateData(c *spec.Cluster, set *pki.Set) (map[string][]byte, error) {
	b, err := json.Marshal(StateOf(c))
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{StateKey: b}
	for p, f := range pki.Files(set) {
		data[path.Base(p)] = f
	}
	return data, nil
}

// SaveState writes the cluster's state and PKI to the Secret
// kube-system/rigger-cluster-state, creating or replacing it; an unchanged
// Secret is not written.
func SaveState(ctx context.Context, cs kubernetes.Interface, c *spec.Cluster, set *pki.Set) error {
	data, err := stateData(c, set)
	if err != nil {
		return fmt.Errorf("save the cluster state: %w", err)
	}
	secrets := cs.CoreV1().Secrets(StateNamespace)
	err = retryAPI(ctx, func() error {
		old, err := secrets.Get(ctx, StateSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: StateSecret, Namespace: StateNamespace,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "rigger"}},
				Type: corev1.SecretTypeOpaque, Data: data,
			}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		if maps.EqualFunc(old.Data, data, func(a, b []byte) bool { return string(a) == string(b) }) {
			return nil
		}
		old.Data = data
		_, err = secrets.Update(ctx, old, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("save the cluster state in Secret %s/%s: %w", StateNamespace, StateSecret, err)
	}
	return nil
}

// NoStateError is a cluster without the state Secret.
type NoStateError struct{}

func (*NoStateError) Error() string {
	return fmt.Sprintf("no Secret %s/%s: the cluster's state was never saved in it", StateNamespace, StateSecret)
}

// LoadState reads the Secret SaveState wrote: the PKI (checked as
// pki.FromFiles checks a node's) and the cluster's state. A missing Secret
// is a *NoStateError.
func LoadState(ctx context.Context, cs kubernetes.Interface) (*pki.Set, *ClusterState, error) {
	var sec *corev1.Secret
	err := retryAPI(ctx, func() (err error) {
		sec, err = cs.CoreV1().Secrets(StateNamespace).Get(ctx, StateSecret, metav1.GetOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, nil, &NoStateError{}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read Secret %s/%s: %w", StateNamespace, StateSecret, err)
	}
	set, st, err := parseState(sec.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("read Secret %s/%s: %w", StateNamespace, StateSecret, err)
	}
	return set, st, nil
}

// maxStateSize bounds the state Secret's data parseState reads: what
// Kubernetes lets a Secret hold.
const maxStateSize = 1 << 20

// parseState reads the data of the state Secret: the cluster's state
// (StateKey) and its PKI, checked as pki.FromFiles checks a node's.
func parseState(data map[string][]byte) (*pki.Set, *ClusterState, error) {
	size := 0
	for _, v := range data {
		size += len(v)
	}
	if size > maxStateSize {
		return nil, nil, fmt.Errorf("more than %d MiB of data: not what rigger saved", maxStateSize>>20)
	}
	st := &ClusterState{}
	if err := json.Unmarshal(data[StateKey], st); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", StateKey, err)
	}
	files := map[string][]byte{}
	for k, v := range data {
		if k != StateKey {
			files[path.Join(pki.NodeDir, k)] = v
		}
	}
	set, err := pki.FromFiles(files)
	if err != nil {
		return nil, nil, err
	}
	return set, st, nil
}
