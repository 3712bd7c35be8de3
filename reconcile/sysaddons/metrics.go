package sysaddons

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/rigger/rigger/spec"
	"github.com/rigger/rigger/spec/rkemeta"
)

// metricsServerOptions is RKE's MetricsServerOptions, the data of its
// metricsServer template.
type metricsServerOptions struct {
	RBACConfig         string
	Options            map[string]string
	NodeSelector       map[string]string
	MetricsServerImage string
	// Version is the major.minor of the image's tag (v0.7); the templates
	// from Kubernetes 1.24 on do not read it.
	Version                        string
	UpdateStrategy                 *appsv1.DeploymentStrategy
	Replicas                       *int32
	Tolerations                    []corev1.Toleration
	MetricsServerPriorityClassName string
}

// metricsServer renders metrics-server as RKE's deployMetricServer does:
// monitoring.options become its extra flags.
func metricsServer(c *spec.Cluster) ([]Manifest, error) {
	m := &c.Monitoring
	if m.Provider == "none" {
		return nil, nil
	}
	s := strings.Split(c.SystemImages.MetricsServer, ":")
	return manifest(c, MetricsServer, rkemeta.AddonMetricsServer, metricsServerOptions{
		RBACConfig:                     c.Authorization.Mode,
		Options:                        m.Options,
		NodeSelector:                   m.NodeSelector,
		MetricsServerImage:             c.SystemImages.MetricsServer,
		Version:                        rkemeta.Series(s[len(s)-1]),
		UpdateStrategy:                 withDeploymentDefaults(toDeploymentStrategy(m.UpdateStrategy)).deployment(),
		Replicas:                       replicas(m.Replicas),
		Tolerations:                    toTolerations(m.Tolerations),
		MetricsServerPriorityClassName: m.MetricsServerPriorityClassName,
	})
}

// replicas is monitoring.replicas, RKE's default 1 when unset.
func replicas(r *int32) *int32 {
	if r == nil {
		return ptr(int32(1))
	}
	return ptr(*r)
}
