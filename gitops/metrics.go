package gitops

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are what serve exposes on /metrics, in a registry of its own.
// A nil *Metrics records nothing.
type Metrics struct {
	reg            *prometheus.Registry
	fetches        *prometheus.CounterVec
	reconciles     *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	nodes          *prometheus.GaugeVec
	problems       *prometheus.GaugeVec
	driftRepairs   *prometheus.CounterVec
	snapshots      *prometheus.CounterVec
	snapshotTime   *prometheus.GaugeVec
	statusCommits  *prometheus.CounterVec
	webhookResults *prometheus.CounterVec
	notifications  *prometheus.CounterVec
	leaseHeld      *prometheus.GaugeVec
}

// NewMetrics registers rigger's metrics and the Go runtime's.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rigger_git_fetches_total",
			Help: "Fetches of the followed branch, by result (ok, failed)."}, []string{"result"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rigger_reconciles_total",
			Help: "Reconciles, by cluster and result (ready, retry, stalled, suspended)."}, []string{"cluster", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rigger_reconcile_duration_seconds",
			Help:    "How long reconciles took, by cluster and result.",
			Buckets: []float64{0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800}}, []string{"cluster", "result"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rigger_nodes",
			Help: "Nodes of cluster.yml by state (ready, not_ready, unreachable, no_node) at the last reconcile."}, []string{"cluster", "state"}),
		problems: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rigger_check_problems",
			Help: "Findings of rigger doctor's checks that the last reconcile's observation answers, by check and level (warn, fail): how many nodes (or the cluster) it found them on."}, []string{"cluster", "check", "level"}),
		driftRepairs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rigger_drift_repairs_total",
			Help: "Steps drift checks carried out: the nodes had changed, cluster.yml had not."}, []string{"cluster"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rigger_etcd_snapshots_total",
			Help: "Scheduled etcd snapshots, by cluster and result (ok, failed)."}, []string{"cluster", "result"}),
		snapshotTime: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rigger_etcd_snapshot_last_success_timestamp_seconds",
			Help: "When the newest etcd snapshot of the cluster was taken (Unix time): alert on its age."}, []string{"cluster"}),
		statusCommits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rigger_status_commits_total",
			Help: "status.yml commits, by result (committed, failed)."}, []string{"result"}),
		webhookResults: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rigger_webhook_requests_total",
			Help: "Webhook requests, by provider and result."}, []string{"provider", "result"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rigger_notifications_total",
			Help: "Notifications and commit statuses, by target (json, slack, github, gitea, gitlab) and result (sent, failed, dropped)."}, []string{"target", "result"}),
		leaseHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rigger_cluster_lease_held",
			Help: "1 for each cluster.yml (path) whose Lease this replica (its id) holds and reconciles, with --leader-elect."}, []string{"path", "replica"}),
	}
	m.reg.MustRegister(m.fetches, m.reconciles, m.duration, m.nodes, m.problems, m.driftRepairs, m.snapshots, m.snapshotTime,
		m.statusCommits, m.webhookResults, m.notifications, m.leaseHeld, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Webhook counts a webhook request (webhook.Config.Observe).
func (m *Metrics) Webhook(provider, result string) {
	if m != nil {
		m.webhookResults.WithLabelValues(provider, result).Inc()
	}
}

// Notification counts a notification or commit status request's result
// (notify.Config.Observe).
func (m *Metrics) Notification(target, result string) {
	if m != nil {
		m.notifications.WithLabelValues(target, result).Inc()
	}
}

func (m *Metrics) fetch(err error) {
	if m != nil {
		m.fetches.WithLabelValues(okOrFailed(err)).Inc()
	}
}

// holding records that this replica (id) holds the Lease of the
// cluster.yml at path, or no longer does.
func (m *Metrics) holding(path, id string, held bool) {
	if m == nil {
		return
	}
	if held {
		m.leaseHeld.WithLabelValues(path, id).Set(1)
		return
	}
	m.leaseHeld.DeleteLabelValues(path, id)
}

func (m *Metrics) statusCommit(result string) {
	if m != nil {
		m.statusCommits.WithLabelValues(result).Inc()
	}
}

func (m *Metrics) drift(cluster string, n int) {
	if m != nil {
		m.driftRepairs.WithLabelValues(cluster).Add(float64(n))
	}
}

// reconciled records a reconcile's result and the nodes it saw.
func (m *Metrics) reconciled(out outcome, d time.Duration) {
	if m == nil || out.cluster == "" {
		return
	}
	result := "ready"
	switch {
	case out.stalled != "":
		result = "stalled"
	case out.suspended:
		result = "suspended"
	case out.retry || out.err != nil:
		result = "retry"
	}
	m.reconciles.WithLabelValues(out.cluster, result).Inc()
	m.duration.WithLabelValues(out.cluster, result).Observe(d.Seconds())
	if out.status == nil {
		return
	}
	counts := map[string]int{"ready": 0, "not_ready": 0, "unreachable": 0, "no_node": 0}
	for _, n := range out.status.Nodes {
		switch {
		case n.Removed:
		case !n.Reachable:
			counts["unreachable"]++
		case n.KubernetesNode == nil:
			counts["no_node"]++
		case n.KubernetesNode.Ready == "True":
			counts["ready"]++
		default:
			counts["not_ready"]++
		}
	}
	for state, n := range counts {
		m.nodes.WithLabelValues(out.cluster, state).Set(float64(n))
	}
	// The last status's problems only: those gone are gone from the
	// metrics too.
	m.problems.DeletePartialMatch(prometheus.Labels{"cluster": out.cluster})
	for _, p := range out.status.Problems {
		m.problems.WithLabelValues(out.cluster, p.Check, string(p.Level)).Inc()
	}
}

func (m *Metrics) snapshot(cluster string, err error) {
	if m != nil {
		m.snapshots.WithLabelValues(cluster, okOrFailed(err)).Inc()
	}
}

func (m *Metrics) snapshotTaken(cluster string, at time.Time) {
	if m != nil {
		m.snapshotTime.WithLabelValues(cluster).Set(float64(at.Unix()))
	}
}

func okOrFailed(err error) string {
	if err != nil {
		return "failed"
	}
	return "ok"
}
