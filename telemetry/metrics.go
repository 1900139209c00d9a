package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/converge-run/converge"
)

// Buckets of the histograms, in seconds.
var (
	// attemptBuckets spans a quick webhook to a long deploy.
	attemptBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	// lagBuckets spans an idle queue to an hour of backlog.
	lagBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
)

// Metrics are the process-local metrics of SPEC §14: what this process saw
// happen. Build one per process with NewMetrics. A nil *Metrics records
// nothing. The methods are safe for concurrent use.
type Metrics struct {
	kinds, rejectKinds, workflows, sources, acceptSources labelSet
	outcomes, reasons, workflowStatuses, deliveryStatuses labelSet
	notificationOutcomes, tables                          labelSet

	eventsAccepted  *prometheus.CounterVec
	eventsRejected  *prometheus.CounterVec
	runsSuperseded  *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	attemptDuration *prometheus.HistogramVec
	queueLag        *prometheus.HistogramVec
	workflowRuns    *prometheus.CounterVec
	deliveries      *prometheus.CounterVec
	notifications   *prometheus.CounterVec
	prunedRows      *prometheus.CounterVec
	attemptsFenced  *prometheus.CounterVec
	workerLastPoll  prometheus.Gauge
	batchFallbacks  prometheus.Counter
}

// NewMetrics registers the metrics with reg and exports every series at
// zero: for each kind, workflow and source of l and each status, outcome,
// reason and table, so that rate() and absent() work before the first
// event. It panics if reg already has them (register once per process).
//
// converge_events_rejected_total is also exported for kind "unknown", the
// kind of an event whose kind is not configured; converge_workflow_runs_total
// and converge_deliveries_total for workflow and source "unknown" when l
// has no workflow or no source.
func NewMetrics(reg prometheus.Registerer, l Labels) *Metrics {
	m := &Metrics{
		kinds:                newLabelSet(UnknownLabel, l.Kinds),
		rejectKinds:          newLabelSet(UnknownLabel, l.Kinds, []string{UnknownLabel}),
		workflows:            newLabelSet(UnknownLabel, l.Workflows),
		sources:              newLabelSet(UnknownLabel, l.Sources),
		acceptSources:        newLabelSet(UnknownLabel, []string{SourceAPI, SourceWorkflow}, l.Sources),
		outcomes:             newLabelSet(OtherLabel, AttemptOutcomes),
		reasons:              newLabelSet(OtherLabel, RejectReasons),
		workflowStatuses:     newLabelSet(OtherLabel, WorkflowRunStatuses),
		deliveryStatuses:     newLabelSet(OtherLabel, DeliveryStatuses),
		notificationOutcomes: newLabelSet(OtherLabel, NotificationOutcomes),
		tables:               newLabelSet(OtherLabel, PrunedTables),

		eventsAccepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_events_accepted_total",
			Help: "Events accepted (new runs; replays not counted), by kind and source (api, workflow or an event source's name).",
		}, []string{"kind", "source"}),
		eventsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_events_rejected_total",
			Help: "Event submissions refused, by kind and reason (the problem slug).",
		}, []string{"kind", "reason"}),
		runsSuperseded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_runs_superseded_total",
			Help: "Runs ended superseded by a newer version of their stream, by kind.",
		}, []string{"kind"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_attempts_total",
			Help: "Attempts (calls to targets) recorded, by kind and outcome.",
		}, []string{"kind", "outcome"}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "converge_attempt_duration_seconds",
			Help:    "Duration of attempts (calls to targets), by kind.",
			Buckets: attemptBuckets,
		}, []string{"kind"}),
		queueLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "converge_queue_lag_seconds",
			Help:    "Time from a run becoming runnable to the start of its attempt, by kind.",
			Buckets: lagBuckets,
		}, []string{"kind"}),
		workflowRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_workflow_runs_total",
			Help: "Workflow runs that entered a status, by workflow and status.",
		}, []string{"workflow", "status"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_deliveries_total",
			Help: "Calls received by event sources, by source and status (accepted, ignored, rejected).",
		}, []string{"source", "status"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_notifications_total",
			Help: "Notifications finished, by outcome (sent, failed, obsolete).",
		}, []string{"outcome"}),
		prunedRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_pruned_rows_total",
			Help: "Rows deleted by retention, by table.",
		}, []string{"table"}),
		attemptsFenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "converge_attempts_fenced_total",
			Help: "Late attempt finishes refused (the attempt had lost its lease or its run had ended), by kind.",
		}, []string{"kind"}),
		workerLastPoll: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "converge_worker_last_poll_timestamp_seconds",
			Help: "Unix time of this process's last poll for work; 0 when it runs no worker or has not polled yet.",
		}),
		batchFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "converge_batch_fallbacks_total",
			Help: "Group-commit batches whose shared transaction failed, so that each request was retried alone.",
		}),
	}
	reg.MustRegister(m.eventsAccepted, m.eventsRejected, m.runsSuperseded, m.attempts,
		m.attemptDuration, m.queueLag, m.workflowRuns, m.deliveries, m.notifications,
		m.prunedRows, m.attemptsFenced, m.workerLastPoll, m.batchFallbacks)
	m.exportZeros()
	return m
}

// exportZeros creates every series of the configured label sets.
func (m *Metrics) exportZeros() {
	for _, k := range m.kinds.values {
		for _, s := range m.acceptSources.values {
			m.eventsAccepted.WithLabelValues(k, s)
		}
		m.runsSuperseded.WithLabelValues(k)
		for _, o := range m.outcomes.values {
			m.attempts.WithLabelValues(k, o)
		}
		m.attemptDuration.WithLabelValues(k)
		m.queueLag.WithLabelValues(k)
		m.attemptsFenced.WithLabelValues(k)
	}
	for _, k := range m.rejectKinds.values {
		for _, r := range m.reasons.values {
			m.eventsRejected.WithLabelValues(k, r)
		}
	}
	for _, w := range orUnknown(m.workflows.values) {
		for _, s := range m.workflowStatuses.values {
			m.workflowRuns.WithLabelValues(w, s)
		}
	}
	for _, src := range orUnknown(m.sources.values) {
		for _, s := range m.deliveryStatuses.values {
			m.deliveries.WithLabelValues(src, s)
		}
	}
	for _, o := range m.notificationOutcomes.values {
		m.notifications.WithLabelValues(o)
	}
	for _, t := range m.tables.values {
		m.prunedRows.WithLabelValues(t)
	}
}

// orUnknown is names, or only UnknownLabel when there are none: a metric
// of configured names (workflows, sources) is still on /metrics, at zero,
// when none is configured, so that every metric SPEC §14 names is there
// from start-up whatever the configuration.
func orUnknown(names []string) []string {
	if len(names) == 0 {
		return []string{UnknownLabel}
	}
	return names
}

// EventAccepted counts an accepted event (a new run, not a replay) of kind
// from source: SourceAPI, SourceWorkflow or an event source's name.
func (m *Metrics) EventAccepted(kind, source string) {
	if m == nil {
		return
	}
	m.eventsAccepted.WithLabelValues(m.kinds.fold(kind), m.acceptSources.fold(source)).Inc()
}

// WorkflowStepAccepted counts a workflow step of kind accepted because its
// last need succeeded (source workflow): the store tells it after the
// finish's commit (store.AcceptObserver). The root steps a workflow run's
// start accepts are counted by the API with EventAccepted.
func (m *Metrics) WorkflowStepAccepted(kind string) {
	m.EventAccepted(kind, SourceWorkflow)
}

// EventRejected counts a refused event submission of kind (any string; an
// unconfigured or empty kind counts as "unknown") with reason, the problem
// slug it was answered with (converge.ErrorCode of the error).
func (m *Metrics) EventRejected(kind, reason string) {
	if m == nil {
		return
	}
	m.eventsRejected.WithLabelValues(m.rejectKinds.fold(kind), m.reasons.fold(reason)).Inc()
}

// RunsSuperseded counts n runs of kind ended superseded by a newer version
// of their stream: the store tells it after the commit of whatever
// accepted that version (store.AcceptObserver).
func (m *Metrics) RunsSuperseded(kind string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.runsSuperseded.WithLabelValues(m.kinds.fold(kind)).Add(float64(n))
}

// AttemptFinished counts an attempt of kind recorded with outcome after d
// (the duration of the call to the target).
func (m *Metrics) AttemptFinished(kind string, outcome converge.AttemptOutcome, d time.Duration) {
	if m == nil {
		return
	}
	k := m.kinds.fold(kind)
	m.attempts.WithLabelValues(k, m.outcomes.fold(string(outcome))).Inc()
	m.attemptDuration.WithLabelValues(k).Observe(d.Seconds())
}

// QueueLag observes d, the time from a run of kind becoming runnable to the
// start of its attempt.
func (m *Metrics) QueueLag(kind string, d time.Duration) {
	if m == nil {
		return
	}
	m.queueLag.WithLabelValues(m.kinds.fold(kind)).Observe(max(d, 0).Seconds())
}

// WorkflowRunStatusChanged counts a workflow run of workflow entering
// status (running, waiting, succeeded, failed, superseded or cancelled).
func (m *Metrics) WorkflowRunStatusChanged(workflow, status string) {
	if m == nil {
		return
	}
	m.workflowRuns.WithLabelValues(m.workflows.fold(workflow), m.workflowStatuses.fold(status)).Inc()
}

// DeliveryReceived counts a call to event source source that ended with
// status: accepted, ignored or rejected.
func (m *Metrics) DeliveryReceived(source, status string) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(m.sources.fold(source), m.deliveryStatuses.fold(status)).Inc()
}

// NotificationFinished counts a notification that ended with outcome:
// sent, failed or obsolete.
func (m *Metrics) NotificationFinished(outcome string) {
	if m == nil {
		return
	}
	m.notifications.WithLabelValues(m.notificationOutcomes.fold(outcome)).Inc()
}

// RowsPruned counts n rows of table deleted by retention (table is one of
// PrunedTables).
func (m *Metrics) RowsPruned(table string, n int64) {
	if m == nil || n <= 0 {
		return
	}
	m.prunedRows.WithLabelValues(m.tables.fold(table)).Add(float64(n))
}

// AttemptFenced counts a late finish of an attempt of kind that was
// refused: its lease was lost or its run had already ended.
func (m *Metrics) AttemptFenced(kind string) {
	if m == nil {
		return
	}
	m.attemptsFenced.WithLabelValues(m.kinds.fold(kind)).Inc()
}

// WorkerPolled records that this process's worker asked for work at t.
func (m *Metrics) WorkerPolled(t time.Time) {
	if m == nil {
		return
	}
	m.workerLastPoll.Set(float64(t.UnixNano()) / 1e9)
}

// BatchFellBack counts a group-commit batch whose shared transaction failed
// and whose requests were then run alone.
func (m *Metrics) BatchFellBack() {
	if m == nil {
		return
	}
	m.batchFallbacks.Inc()
}
