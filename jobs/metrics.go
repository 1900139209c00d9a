package jobs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge"
)

// Metrics are the worker's Prometheus metrics. A nil *Metrics records
// nothing.
type Metrics struct {
	attempts *prometheus.CounterVec
	duration *prometheus.HistogramVec
	finished *prometheus.CounterVec
}

// NewMetrics registers the worker metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_attempts_total", Help: "Calls to targets, by kind and outcome.",
		}, []string{"kind", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "converge_attempt_duration_seconds", Help: "Duration of calls to targets.",
			Buckets: prometheus.DefBuckets,
		}, []string{"kind"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_runs_finished_total", Help: "Runs that reached a terminal status in this process, by kind and status.",
		}, []string{"kind", "status"}),
	}
	reg.MustRegister(m.attempts, m.duration, m.finished)
	return m
}

func (m *Metrics) observeAttempt(kind string, status converge.RunStatus, err *converge.Error, d time.Duration) {
	if m == nil {
		return
	}
	outcome := "succeeded"
	if err != nil {
		outcome = string(err.Class) + "_error"
	}
	m.attempts.WithLabelValues(kind, outcome).Inc()
	m.duration.WithLabelValues(kind).Observe(d.Seconds())
	if status.Terminal() {
		m.finished.WithLabelValues(kind, string(status)).Inc()
	}
}
