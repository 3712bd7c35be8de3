package secretstate

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/rigger/rigger/transport/agenttun"
)

// The agent tunnel's Secrets: its CA, and a Secret per record.
const (
	// AgentCASecret holds the agent tunnel's CA (type kubernetes.io/tls).
	AgentCASecret = "rigger-agent-ca"
	// AgentKindLabel labels a record's Secret with its kind (tokens,
	// approvals, nodes).
	AgentKindLabel = "rigger.io/agent-tunnel"
	// AgentRecordAnnotation is the record's key.
	AgentRecordAnnotation = "rigger.io/agent-record"
	// AgentRecordType is the type of a record's Secret.
	AgentRecordType corev1.SecretType = "rigger.io/agent-tunnel"
)

// AgentRecords keeps what the agent tunnel's endpoint remembers (an
// agenttun.Backend) in Secrets of one namespace, for rigger serve with
// --state-backend kubernetes and --agent-listen: every replica, and
// rigger agent command and approve run with a kubeconfig, share it. The CA
// is the Secret AgentCASecret; each join token (by its hash), join
// waiting for approval and node's certificate serial is a Secret of its
// own, named for its key. Each write is a compare-and-swap on the Secret's
// resourceVersion.
type AgentRecords struct {
	// Secrets is the API of the namespace (client.CoreV1().Secrets(ns)).
	Secrets corev1client.SecretInterface
	// Namespace names it, in messages.
	Namespace string
}

var _ agenttun.Backend = (*AgentRecords)(nil)

func (a *AgentRecords) Where() string { return "the Secrets of namespace " + a.Namespace }

// agentSecretName is the name of the Secret of key (checked by
// agenttun.CheckKey): rigger-agent-<kind>-<hash>.
func agentSecretName(key string) string {
	kind, file, _ := strings.Cut(key, "/")
	return "rigger-agent-" + kind + "-" + strings.TrimSuffix(file, ".json")
}

func (a *AgentRecords) ReadCA(ctx context.Context) ([]byte, []byte, error) {
	sec, err := a.Secrets.Get(ctx, AgentCASecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil, fs.ErrNotExist
	case err != nil:
		return nil, nil, fmt.Errorf("read Secret %s/%s: %w", a.Namespace, AgentCASecret, err)
	case sec.Type != corev1.SecretTypeTLS || len(sec.Data[corev1.TLSCertKey]) == 0 || len(sec.Data[corev1.TLSPrivateKeyKey]) == 0:
		return nil, nil, fmt.Errorf("Secret %s/%s is not the CA rigger keeps there (type %s with %s and %s): restore it from a backup",
			a.Namespace, AgentCASecret, corev1.SecretTypeTLS, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	return sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey], nil
}

func (a *AgentRecords) CreateCA(ctx context.Context, certPEM, keyPEM []byte) error {
	_, err := a.Secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: AgentCASecret, Namespace: a.Namespace,
			Labels: map[string]string{ManagedByLabel: ManagedBy}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return agenttun.ErrExists
	}
	if err != nil {
		return fmt.Errorf("create Secret %s/%s: %w", a.Namespace, AgentCASecret, err)
	}
	return nil
}

// record is the record a Secret holds, or why it holds none.
func record(sec *corev1.Secret) (agenttun.Record, error) {
	key := sec.Annotations[AgentRecordAnnotation]
	switch {
	case agenttun.CheckKey(key) != nil:
		return agenttun.Record{}, fmt.Errorf("annotation %s=%q is not a record's key", AgentRecordAnnotation, key)
	case sec.Name != agentSecretName(key):
		return agenttun.Record{}, fmt.Errorf("it says it holds %s, whose Secret is %s", key, agentSecretName(key))
	case sec.Type != AgentRecordType:
		return agenttun.Record{}, fmt.Errorf("type %q, not %q", sec.Type, AgentRecordType)
	}
	return agenttun.Record{Key: key, Data: sec.Data[DataKey], Version: sec.ResourceVersion}, nil
}

func (a *AgentRecords) Get(ctx context.Context, key string) (agenttun.Record, error) {
	if err := agenttun.CheckKey(key); err != nil {
		return agenttun.Record{}, err
	}
	name := agentSecretName(key)
	sec, err := a.Secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return agenttun.Record{}, fs.ErrNotExist
	case err != nil:
		return agenttun.Record{}, fmt.Errorf("read Secret %s/%s: %w", a.Namespace, name, err)
	}
	r, err := record(sec)
	if err != nil {
		return agenttun.Record{}, fmt.Errorf("Secret %s/%s: %w: rigger did not write it so; delete it", a.Namespace, name, err)
	}
	return r, nil
}

func (a *AgentRecords) Put(ctx context.Context, key string, b []byte, version string) error {
	if err := agenttun.CheckKey(key); err != nil {
		return err
	}
	kind, _, _ := strings.Cut(key, "/")
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:            agentSecretName(key),
			Namespace:       a.Namespace,
			Labels:          map[string]string{AgentKindLabel: kind, ManagedByLabel: ManagedBy},
			Annotations:     map[string]string{AgentRecordAnnotation: key},
			ResourceVersion: version,
		},
		Type: AgentRecordType,
		Data: map[string][]byte{DataKey: b},
	}
	var err error
	if version == "" {
		_, err = a.Secrets.Create(ctx, sec, metav1.CreateOptions{})
	} else {
		_, err = a.Secrets.Update(ctx, sec, metav1.UpdateOptions{})
	}
	switch {
	case version == "" && apierrors.IsAlreadyExists(err):
		return agenttun.ErrExists
	case version != "" && (apierrors.IsConflict(err) || apierrors.IsNotFound(err)):
		return agenttun.ErrConflict
	case err != nil:
		return fmt.Errorf("write Secret %s/%s: %w", a.Namespace, sec.Name, err)
	}
	return nil
}

func (a *AgentRecords) Delete(ctx context.Context, key, version string) error {
	if err := agenttun.CheckKey(key); err != nil {
		return err
	}
	name := agentSecretName(key)
	var opts metav1.DeleteOptions
	if version != "" {
		opts.Preconditions = &metav1.Preconditions{ResourceVersion: &version}
	}
	err := a.Secrets.Delete(ctx, name, opts)
	switch {
	case apierrors.IsNotFound(err):
		return fs.ErrNotExist
	case apierrors.IsConflict(err):
		return agenttun.ErrConflict
	case err != nil:
		return fmt.Errorf("remove Secret %s/%s: %w", a.Namespace, name, err)
	}
	return nil
}

// List reads the records of kind; a Secret labelled so that rigger did
// not write so is left out (Get names it).
func (a *AgentRecords) List(ctx context.Context, kind string) ([]agenttun.Record, error) {
	list, err := a.Secrets.List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{AgentKindLabel: kind, ManagedByLabel: ManagedBy}.String()})
	if err != nil {
		return nil, fmt.Errorf("list the Secrets of the agent tunnel's %s in namespace %s: %w", kind, a.Namespace, err)
	}
	var out []agenttun.Record
	for i := range list.Items {
		r, err := record(&list.Items[i])
		if err == nil && strings.HasPrefix(r.Key, kind+"/") {
			out = append(out, r)
		}
	}
	return out, nil
}
