package sweeper

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	metricsNamespace = "ttlproxy"
	metricsSubsystem = "sweeper"
)

// metrics are the sweeper's Prometheus collectors. Table labels are
// "schema.table" (ttl.Rule.QualifiedName; for a sidecar registry, its own
// qualified name).
type metrics struct {
	rowsDeleted   *prometheus.CounterVec
	batches       *prometheus.CounterVec
	errors        *prometheus.CounterVec
	runs          *prometheus.CounterVec
	runDuration   prometheus.Histogram
	lastRun       prometheus.Gauge
	oldestExpired *prometheus.GaugeVec
	batchDuration *prometheus.HistogramVec
	batchSize     *prometheus.GaugeVec
	slicesHeld    *prometheus.GaugeVec
	slicesSkipped *prometheus.CounterVec
	backlog       *prometheus.GaugeVec
	// partitionsDropped counts expired partitions detached and dropped.
	partitionsDropped *prometheus.CounterVec
	// rowsNulled and columnBacklog are an expiring column's rowsDeleted and
	// backlog (columns.go), labelled by table and column.
	rowsNulled    *prometheus.CounterVec
	columnBacklog *prometheus.GaugeVec
	// inflow, deleteRate and drain: the backlog coming (inflow.go).
	inflow     *prometheus.GaugeVec
	deleteRate *prometheus.GaugeVec
	drain      *prometheus.GaugeVec
}

// Metrics are a sweeper's Prometheus collectors, made once and handed to
// each Sweeper a process builds (Config.Metrics), so that a reload that
// replaces the sweeper keeps its counters counting and its last run's time
// instead of starting again from zero.
type Metrics struct{ m *metrics }

// NewMetrics registers the sweeper's collectors with reg; the error is
// reg's (a collector registered twice).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Metrics{m: m}, nil
}

// forgetTables drops the per-table gauges, which a new sweeper sets again
// at its first run: a table no longer configured must not keep reporting
// the backlog it had. Counters and the last run's time stay.
func (m *metrics) forgetTables() {
	m.oldestExpired.Reset()
	m.batchSize.Reset()
	m.slicesHeld.Reset()
	m.backlog.Reset()
	m.columnBacklog.Reset()
	m.inflow.Reset()
	m.deleteRate.Reset()
	m.drain.Reset()
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	name := func(n string) string {
		return prometheus.BuildFQName(metricsNamespace, metricsSubsystem, n)
	}
	m := &metrics{
		rowsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("rows_deleted_total"),
			Help: "Expired rows deleted by the sweeper.",
		}, []string{"table"}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("batches_total"),
			Help: "DELETE batches that completed.",
		}, []string{"table"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("errors_total"),
			Help: "Failed sweeper statements (batch timeouts included).",
		}, []string{"table"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("runs_total"),
			Help: "Sweeper runs by result: ok (every table swept), partial (some tables failed), failed (no cutoff: database unreachable).",
		}, []string{"result"}),
		runDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: name("run_duration_seconds"),
			Help: "Duration of one sweeper run over all tables.",
			// 50ms up to ~7 minutes.
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: name("last_run_timestamp_seconds"),
			Help: "Unix time at which the last sweeper run ended.",
		}),
		oldestExpired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: name("oldest_expired_age_seconds"),
			Help: "Age at the run's cutoff of the oldest expired row still present after the run; 0 when none. Only for column rules and fixed derived rules with a btree index on the column.",
		}, []string{"table"}),
	}
	m.batchDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: name("batch_duration_seconds"),
		Help: "Duration of one DELETE batch (its transaction).",
		// 1ms up to ~4s.
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 13),
	}, []string{"table"})
	m.batchSize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: name("batch_size"),
		Help: "Rows the next DELETE batch of the table removes at most (adapted to target_batch_duration).",
	}, []string{"table"})
	m.slicesHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: name("slices_held"),
		Help: "Slices of the table this instance holds now (advisory lock taken, sweeping).",
	}, []string{"table"})
	m.slicesSkipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: name("slices_skipped_total"),
		Help: "Slices left to another instance that held them.",
	}, []string{"table"})
	m.backlog = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: name("backlog_rows"),
		Help: "Expired rows of the table left to delete: counted at the start of the table's sweep (exact up to 10,000, the planner's estimate above), less the rows deleted since.",
	}, []string{"table"})
	m.partitionsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: name("partitions_dropped_total"),
		Help: "Expired partitions detached and dropped instead of swept row by row (drop_expired_partitions).",
	}, []string{"table"})
	m.rowsNulled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: name("rows_nulled_total"),
		Help: "Expired values of an expiring column set to NULL by the sweeper (one per row).",
	}, []string{"table", "column"})
	m.columnBacklog = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: name("column_backlog_rows"),
		Help: "Rows of the table whose value of the column is expired and not yet NULL, the row itself live: counted at the start of the column's sweep (exact up to 10,000, the planner's estimate above), less the values nulled since.",
	}, []string{"table", "column"})
	m.inflow = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: name("inflow_rows_per_second"),
		Help: "Rows of the table that expired per second, counted at the start of the table's sweep over the time since the previous run's cutoff (at most a minute) through the index on the expiry column; a lower bound above 200,000 rows per window or with several instances. Only for column rules and fixed derived rules with a btree index on the column.",
	}, []string{"table"})
	m.deleteRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: name("delete_rate_rows_per_second"),
		Help: "Rows the table's last sweep that deleted any deleted per second of that sweep, the pacing's waits included: the rate the backlog drains at while the sweeper runs.",
	}, []string{"table"})
	m.drain = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: name("drain_seconds"),
		Help: "Estimated time to delete the table's backlog: backlog_rows over delete_rate_rows_per_second less inflow_rows_per_second; +Inf when the inflow is at or above the rate (the backlog grows), 0 when none is left.",
	}, []string{"table"})
	if reg == nil {
		return m, nil
	}
	var done []prometheus.Collector
	for _, c := range []prometheus.Collector{
		m.rowsDeleted, m.batches, m.errors, m.runs, m.runDuration, m.lastRun, m.oldestExpired,
		m.batchDuration, m.batchSize, m.slicesHeld, m.slicesSkipped, m.backlog, m.partitionsDropped,
		m.rowsNulled, m.columnBacklog, m.inflow, m.deleteRate, m.drain,
	} {
		if err := reg.Register(c); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("registering sweeper metrics: already registered (one Sweeper per registry)")
			}
			return nil, fmt.Errorf("registering sweeper metrics: %w", err)
		}
		done = append(done, c)
	}
	return m, nil
}
