package secretsenc

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// RewritePageSize is how many Secrets one list call returns while they are
// rewritten (RKE's batch size): small pages keep each call short.
const RewritePageSize = 250

// RewriteSecrets updates every Secret of every namespace with no change,
// so that the API server stores it again with its first provider (the
// key that encrypts now). Secrets are listed a page at a time; a page
// whose continue token expired starts the listing again, skipping those
// rewritten already. An update that conflicts is retried on the current
// object; a Secret deleted meanwhile needs no rewrite. progress, when set,
// is told the count after each page. It returns how many were rewritten.
func RewriteSecrets(ctx context.Context, cs kubernetes.Interface, progress func(rewritten int)) (int, error) {
	secrets := cs.CoreV1().Secrets(metav1.NamespaceAll)
	done := map[string]bool{}
	cont := ""
	for {
		list, err := secrets.List(ctx, metav1.ListOptions{Limit: RewritePageSize, Continue: cont})
		if apierrors.IsResourceExpired(err) && cont != "" {
			cont = "" // the token expired: list again from the start
			continue
		}
		if err != nil {
			return len(done), fmt.Errorf("list Secrets to rewrite them (%d rewritten): %w", len(done), err)
		}
		for i := range list.Items {
			s := &list.Items[i]
			id := s.Namespace + "/" + s.Name
			if done[id] {
				continue
			}
			if err := rewriteSecret(ctx, cs, s); err != nil {
				return len(done), fmt.Errorf("rewrite Secret %s (%d rewritten): %w", id, len(done), err)
			}
			done[id] = true
		}
		if progress != nil {
			progress(len(done))
		}
		if cont = list.Continue; cont == "" {
			return len(done), nil
		}
	}
}

// rewriteSecret updates s as listed and, on a conflict, the Secret as it
// is now.
func rewriteSecret(ctx context.Context, cs kubernetes.Interface, s *corev1.Secret) error {
	client := cs.CoreV1().Secrets(s.Namespace)
	cur := s
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur == nil {
			var err error
			if cur, err = client.Get(ctx, s.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return err
			}
		}
		_, err := client.Update(ctx, cur, metav1.UpdateOptions{})
		cur = nil
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}
