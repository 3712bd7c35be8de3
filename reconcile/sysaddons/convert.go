package sysaddons

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rigger/rigger/spec"
)

// defaultDaemonSetStrategy is RKE's DefaultDaemonSetUpdateStrategy, the
// update strategy of a DaemonSet add-on that sets none.
func defaultDaemonSetStrategy() *daemonSetStrategy {
	return &daemonSetStrategy{
		Strategy:      appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr(intstr.FromInt32(1))},
	}
}

// defaultDeploymentStrategy is RKE's DefaultDeploymentUpdateStrategy, the
// update strategy of a Deployment add-on that sets none.
func defaultDeploymentStrategy() *deploymentStrategy {
	return &deploymentStrategy{
		Strategy: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr(intstr.FromString("25%")),
			MaxSurge:       ptr(intstr.FromString("25%")),
		},
	}
}

// daemonSetStrategy is RKE's DaemonSetUpdateStrategy: cluster.yml's
// update_strategy of a DaemonSet add-on.
type daemonSetStrategy struct {
	Strategy      appsv1.DaemonSetUpdateStrategyType
	RollingUpdate *appsv1.RollingUpdateDaemonSet
}

// deploymentStrategy is RKE's DeploymentStrategy: cluster.yml's
// update_strategy of a Deployment add-on.
type deploymentStrategy struct {
	Strategy      appsv1.DeploymentStrategyType
	RollingUpdate *appsv1.RollingUpdateDeployment
}

// toDaemonSetStrategy reads cluster.yml's update_strategy of a DaemonSet
// add-on as RKE does; nil when none is given.
func toDaemonSetStrategy(u *spec.DaemonSetUpdateStrategy) *daemonSetStrategy {
	if u == nil {
		return nil
	}
	s := &daemonSetStrategy{Strategy: appsv1.DaemonSetUpdateStrategyType(u.Strategy)}
	if r := u.RollingUpdate; r != nil {
		s.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: intOrString(r.MaxUnavailable), MaxSurge: intOrString(r.MaxSurge)}
	}
	return s
}

// toDeploymentStrategy reads cluster.yml's update_strategy of a Deployment
// add-on as RKE does; nil when none is given.
func toDeploymentStrategy(u *spec.DeploymentStrategy) *deploymentStrategy {
	if u == nil {
		return nil
	}
	s := &deploymentStrategy{Strategy: appsv1.DeploymentStrategyType(u.Strategy)}
	if r := u.RollingUpdate; r != nil {
		s.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: intOrString(r.MaxUnavailable), MaxSurge: intOrString(r.MaxSurge)}
	}
	return s
}

// intOrString reads maxUnavailable or maxSurge: nil when empty, a number
// when it is one, else a string (a percentage). RKE reads cluster.yml's
// YAML number 1 as the number and "25%" as the string; rigger's spec keeps
// both as text, so a quoted "1" becomes the number here too (RKE would
// pass the string "1", which the API server refuses).
func intOrString(s string) *intstr.IntOrString {
	if s == "" {
		return nil
	}
	if i, err := strconv.ParseInt(s, 10, 32); err == nil {
		return ptr(intstr.FromInt32(int32(i)))
	}
	return ptr(intstr.FromString(s))
}

// withDaemonSetDefaults is RKE's setDaemonsetAddonDefaults: a strategy
// other than RollingUpdate is kept as given (an empty one too, so that a
// rollingUpdate without strategy keeps no type, as in RKE); RollingUpdate
// without maxUnavailable, or no strategy at all, takes RKE's default.
func withDaemonSetDefaults(s *daemonSetStrategy) *daemonSetStrategy {
	if s != nil && s.Strategy != appsv1.RollingUpdateDaemonSetStrategyType {
		return s
	}
	if s == nil || s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable == nil {
		return defaultDaemonSetStrategy()
	}
	return s
}

// withDeploymentDefaults is RKE's setDeploymentAddonDefaults.
func withDeploymentDefaults(s *deploymentStrategy) *deploymentStrategy {
	if s != nil && s.Strategy != appsv1.RollingUpdateDeploymentStrategyType {
		return s
	}
	if s == nil || s.RollingUpdate == nil {
		return defaultDeploymentStrategy()
	}
	if s.RollingUpdate.MaxUnavailable == nil {
		s.RollingUpdate.MaxUnavailable = ptr(intstr.FromString("25%"))
	}
	if s.RollingUpdate.MaxSurge == nil {
		s.RollingUpdate.MaxSurge = ptr(intstr.FromString("25%"))
	}
	return s
}

// withDNSDefaults is RKE's setDNSDeploymentAddonDefaults: CoreDNS rolls
// one pod at a time without surge, kube-dns surges 10% with none
// unavailable.
func withDNSDefaults(s *deploymentStrategy, provider string) *deploymentStrategy {
	if s != nil && s.Strategy != appsv1.RollingUpdateDeploymentStrategyType && s.Strategy != "" {
		return s
	}
	var maxUnavailable, maxSurge intstr.IntOrString
	switch provider {
	case spec.DefaultDNSProvider:
		maxUnavailable, maxSurge = intstr.FromInt32(1), intstr.FromInt32(0)
		if s == nil || s.RollingUpdate == nil {
			return &deploymentStrategy{
				Strategy:      appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &maxUnavailable, MaxSurge: &maxSurge},
			}
		}
		if s.RollingUpdate.MaxUnavailable == nil {
			s.RollingUpdate.MaxUnavailable = &maxUnavailable
		}
	case dnsKubeDNS:
		maxUnavailable, maxSurge = intstr.FromInt32(0), intstr.FromString("10%")
		if s == nil || s.RollingUpdate == nil {
			return &deploymentStrategy{
				Strategy:      appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &maxUnavailable, MaxSurge: &maxSurge},
			}
		}
		if s.RollingUpdate.MaxSurge == nil {
			s.RollingUpdate.MaxSurge = &maxSurge
		}
	}
	return s
}

// daemonSet is the strategy RKE hands a DaemonSet template.
func (s *daemonSetStrategy) daemonSet() *appsv1.DaemonSetUpdateStrategy {
	return &appsv1.DaemonSetUpdateStrategy{Type: s.Strategy, RollingUpdate: s.RollingUpdate}
}

// deployment is the strategy RKE hands a Deployment template.
func (s *deploymentStrategy) deployment() *appsv1.DeploymentStrategy {
	return &appsv1.DeploymentStrategy{Type: s.Strategy, RollingUpdate: s.RollingUpdate}
}

// toTolerations converts cluster.yml's tolerations to Kubernetes'; nil when
// there are none, as RKE passes them.
func toTolerations(ts []spec.Toleration) []corev1.Toleration {
	if len(ts) == 0 {
		return nil
	}
	out := make([]corev1.Toleration, len(ts))
	for i, t := range ts {
		out[i] = corev1.Toleration{
			Key:               t.Key,
			Operator:          corev1.TolerationOperator(t.Operator),
			Value:             t.Value,
			Effect:            corev1.TaintEffect(t.Effect),
			TolerationSeconds: t.TolerationSeconds,
		}
	}
	return out
}

// toKubernetes reads free-form objects of cluster.yml (ingress.extra_envs,
// extra_volumes, extra_volume_mounts) as the Kubernetes type T, as RKE
// does (through JSON, field names matched without regard to case), but
// strictly: a key T does not have is an error naming it, where RKE drops
// it silently.
func toKubernetes[T any](key string, objs []spec.Object) ([]T, error) {
	if len(objs) == 0 {
		return nil, nil
	}
	out := make([]T, len(objs))
	for i, o := range objs {
		j, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", key, i, err)
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&out[i]); err != nil {
			return nil, fmt.Errorf("%s[%d]: %v; write it as a Kubernetes %T, with the keys kubectl accepts there", key, i, err, out[i])
		}
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }
