package gitops

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rigger/rigger/reconcile/doctor"
	"github.com/rigger/rigger/reconcile/report"
)

func TestMetricsProblems(t *testing.T) {
	m := NewMetrics()
	st := &report.Status{Problems: []doctor.Finding{
		{Node: "10.0.0.1", Check: doctor.CheckContainers, Level: doctor.Fail},
		{Node: "10.0.0.2", Check: doctor.CheckContainers, Level: doctor.Fail},
		{Node: "10.0.0.2", Check: doctor.CheckCertificates, Level: doctor.Warn},
	}}
	m.reconciled(outcome{cluster: "c", status: st}, 0)
	if got := testutil.ToFloat64(m.problems.WithLabelValues("c", doctor.CheckContainers, "fail")); got != 2 {
		t.Errorf("containers fail = %v, want 2", got)
	}
	if got := testutil.CollectAndCount(m.problems); got != 2 {
		t.Errorf("%d series, want 2", got)
	}
	m.reconciled(outcome{cluster: "c", status: &report.Status{}}, 0)
	if got := testutil.CollectAndCount(m.problems); got != 0 {
		t.Errorf("%d series left once the problems are gone", got)
	}
}

func TestMetricsNotification(t *testing.T) {
	m := NewMetrics()
	m.Notification("slack", "sent")
	m.Notification("slack", "sent")
	m.Notification("github", "failed")
	if got := testutil.ToFloat64(m.notifications.WithLabelValues("slack", "sent")); got != 2 {
		t.Errorf("slack sent = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.notifications.WithLabelValues("github", "failed")); got != 1 {
		t.Errorf("github failed = %v, want 1", got)
	}
	var none *Metrics
	none.Notification("json", "sent") // a nil Metrics records nothing
}
