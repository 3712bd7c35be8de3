package addons

import (
	"cmp"
	"slices"
)

// kindOrder is the order kinds are applied in after the CRDs and Namespaces
// (Helm's install order). Kinds not listed (custom resources and anything
// newer) go after Ingress and before the API services and admission
// webhooks, which come last so that a webhook's backend exists before the
// API server starts calling it.
var kindOrder = []string{
	"PriorityClass",
	"NetworkPolicy",
	"ResourceQuota",
	"LimitRange",
	"PodSecurityPolicy",
	"PodDisruptionBudget",
	"ServiceAccount",
	"Secret",
	"ConfigMap",
	"StorageClass",
	"PersistentVolume",
	"PersistentVolumeClaim",
	"ClusterRole",
	"ClusterRoleBinding",
	"Role",
	"RoleBinding",
	"Service",
	"DaemonSet",
	"Pod",
	"ReplicationController",
	"ReplicaSet",
	"Deployment",
	"HorizontalPodAutoscaler",
	"StatefulSet",
	"Job",
	"CronJob",
	"IngressClass",
	"Ingress",
	"", // every kind not listed
	"APIService",
	"MutatingWebhookConfiguration",
	"ValidatingWebhookConfiguration",
	"ValidatingAdmissionPolicy",
	"ValidatingAdmissionPolicyBinding",
}

// kindRank is each kind's place in kindOrder; unknownRank is that of the
// kinds not listed.
var kindRank, unknownRank = func() (map[string]int, int) {
	m := make(map[string]int, len(kindOrder))
	for i, k := range kindOrder {
		m[k] = i
	}
	return m, m[""]
}()

// isCRD reports whether r is a CustomResourceDefinition.
func isCRD(r ObjectRef) bool {
	return r.Group == "apiextensions.k8s.io" && r.Kind == "CustomResourceDefinition"
}

// isNamespace reports whether r is a Namespace.
func isNamespace(r ObjectRef) bool { return r.Group == "" && r.Kind == "Namespace" }

// firstPhase reports whether r is applied before everything else: CRDs (so
// that their kinds are served) and Namespaces (so that objects can be
// created in them).
func firstPhase(r ObjectRef) bool { return isCRD(r) || isNamespace(r) }

// rank is r's place in the apply order: CRDs, then Namespaces, then
// kindOrder.
func rank(r ObjectRef) int {
	switch {
	case isCRD(r):
		return -2
	case isNamespace(r):
		return -1
	}
	if i, ok := kindRank[r.Kind]; ok {
		return i
	}
	return unknownRank
}

// sortForApply orders items by rank, keeping the given order within a rank.
func sortForApply[T any](items []T, ref func(T) ObjectRef) {
	slices.SortStableFunc(items, func(a, b T) int { return cmp.Compare(rank(ref(a)), rank(ref(b))) })
}

// sortForDelete orders items the reverse way: webhooks first, Namespaces
// and CRDs last (deleting them deletes what they hold); within a rank, by
// namespace and name so that the order is the same on every run.
func sortForDelete(refs []ObjectRef) {
	slices.SortStableFunc(refs, func(a, b ObjectRef) int {
		return cmp.Or(cmp.Compare(rank(b), rank(a)), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind))
	})
}
