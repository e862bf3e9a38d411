package proxy

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttlproxy/ttlproxy/rewrite"
)

// metrics are created even without a Registerer so the hot path never checks
// for nil; unregistered collectors cost the same few nanoseconds.
type metrics struct {
	clientConnections      prometheus.Gauge
	clientConnectionsTotal prometheus.Counter
	passthrough            prometheus.Counter
	rewritten              prometheus.Counter
	rejected               prometheus.Counter
	rewriteDuration        prometheus.Histogram
	rewriteCacheHits       prometheus.Counter
	upstreamErrors         prometheus.Counter
	cancelRequests         prometheus.Counter
	cancelResults          *prometheus.CounterVec
	sessionRefreshes       prometheus.Counter
	refused                prometheus.Counter
	acceptErrors           *prometheus.CounterVec
	rejections             *prometheus.CounterVec
	// retired sums the shape counters of the rewriters a reload replaced.
	retiredMu      sync.Mutex
	retired        rewrite.Stats
	loginTimeouts  prometheus.Counter
	idleTimeouts   prometheus.Counter
	idleTxTimeouts prometheus.Counter
	// DDL events (ddlevents.go), by database.
	ddlFlowing *prometheus.GaugeVec
	ddlEvents  *prometheus.CounterVec
	ddlReads   *prometheus.CounterVec
	ddlClosed  prometheus.Counter
	ttlMissing *prometheus.GaugeVec
	// Transaction pooling (pooled.go, poolmetrics.go).
	poolWait        prometheus.Histogram
	poolPins        *prometheus.CounterVec
	poolPinned      *prometheus.GaugeVec
	poolPinRefusals prometheus.Counter
	poolReadbacks   prometheus.Counter
	poolApplies     *prometheus.CounterVec
	// Server restarts as a pool sees them (pool.go's loginObserver).
	poolLoginFailures *prometheus.CounterVec
	poolLoginRetries  prometheus.Counter
	poolRecovery      prometheus.Histogram
	poolNoServer      *prometheus.CounterVec
}

const (
	namespace = "ttlproxy"
	subsystem = "proxy"
)

// newMetrics builds the metrics; rw returns the current rewriter, whose
// shape-cache counters are exported (retire keeps them monotonic across a
// reload).
func newMetrics(reg prometheus.Registerer, rw func() *rewrite.Rewriter) (*metrics, error) {
	statements := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "statements_total",
		Help: "Query and Parse statements by outcome: passthrough (sent unchanged), rewritten, rejected.",
	}, []string{"outcome"})
	timeouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: subsystem,
		Name: "client_timeouts_total",
		Help: "Clients closed by a timeout: login (client_login_timeout), idle_session (idle_session_timeout) or idle_transaction (idle_transaction_timeout).",
	}, []string{"reason"})
	m := &metrics{
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "rejections_total",
			Help: "Statements rejected by the proxy, by the SQLSTATE the client got.",
		}, []string{"sqlstate"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "client_connections_refused_total",
			Help: "Clients refused at startup because max_client_connections were open (SQLSTATE 53300).",
		}),
		acceptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "accept_errors_total",
			Help: "Transient errors accepting client connections, retried after a backoff, by reason: emfile (process out of file descriptors), enfile (system out of file descriptors), enobufs, enomem, timeout.",
		}, []string{"reason"}),
		loginTimeouts:  timeouts.WithLabelValues("login"),
		idleTimeouts:   timeouts.WithLabelValues("idle_session"),
		idleTxTimeouts: timeouts.WithLabelValues("idle_transaction"),
		clientConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "client_connections",
			Help: "Client connections currently open.",
		}),
		clientConnectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "client_connections_total",
			Help: "Client connections accepted (cancel requests included).",
		}),
		passthrough: statements.WithLabelValues("passthrough"),
		rewritten:   statements.WithLabelValues("rewritten"),
		rejected:    statements.WithLabelValues("rejected"),
		rewriteDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "rewrite_duration_seconds",
			Help: "Time spent rewriting one Query or Parse text.",
			// 1µs to ~4ms: the fast path is sub-microsecond, a cached
			// rewrite a few µs, a parse and splice tens to hundreds of µs.
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 13),
		}),
		rewriteCacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "rewrite_cache_hits_total",
			Help: "Rewrites answered from the rewrite cache.",
		}),
		upstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "upstream_errors_total",
			Help: "Failed upstream dials and upstream connections lost mid-session.",
		}),
		cancelRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "cancel_requests_total",
			Help: "CancelRequests received; ttlproxy_proxy_cancel_results_total says what became of them.",
		}),
		cancelResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "cancel_results_total",
			Help: "CancelRequests by result: forwarded (to the server running the statement), to_peer (to the instance that issued the key, transaction mode), stale (the key's client ran no statement), unknown (no client of the instance has the key, or no peer its id), peer_down (the key's peer could not be reached).",
		}, []string{"result"}),
		ddlFlowing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "ddl_events_flowing",
			Help: "1 while the proxy listens for the database's DDL events (ttlproxy install --ddl-events) and its event triggers are installed; 0 otherwise, when DDL made outside the proxy reaches sessions within catalog_ttl.",
		}, []string{"database"}),
		ddlEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "ddl_events_total",
			Help: "DDL event notifications received, by database.",
		}, []string{"database"}),
		ddlReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "ddl_catalog_reads_total",
			Help: "Catalog reads on the proxy's own connection after DDL events (at most one per database per 100 ms), by database and result (ok, failed).",
		}, []string{"database", "result"}),
		ddlClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "ddl_sessions_closed_total",
			Help: "Sessions closed inside a transaction block because the catalog changed and could not be read again within 5 s.",
		}),
		ttlMissing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "ttl_tables_missing",
			Help: "TTL rule tables of the database that its catalog, read after DDL events, no longer holds under the rule's name, or that lack a column their rule reads (renamed, moved, dropped or altered outside the proxy), by database.",
		}, []string{"database"}),
		poolWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_wait_seconds",
			Help: "How long a client waited for a server connection at the start of a transaction (0 when one was idle), transaction mode.",
			// 50 µs to about 3 minutes (query_wait_timeout's default is 2).
			Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 17),
		}),
		poolPins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_pins_total",
			Help: "Clients pinned to their server connection beyond a transaction, by the reason of the pin (temp, advisory_lock, listen, hold_cursor, sql_prepare, session_authorization: until the server shows the state gone; load, prepared, function_call, dblink, settings: for the client's life), transaction mode.",
		}, []string{"reason"}),
		poolPinned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_pinned_clients",
			Help: "Clients keeping their server connection now, by the reason they were pinned for, transaction mode.",
		}, []string{"reason"}),
		poolPinRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_pin_refusals_total",
			Help: "Statements refused (53000, not run) because they would pin a client while max_pinned_connections clients of its pool were pinned, transaction mode.",
		}),
		poolReadbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_settings_readbacks_total",
			Help: "Session settings read back from a server before its release, after a transaction that may have changed them, transaction mode.",
		}),
		poolApplies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_settings_applies_total",
			Help: "Clients' settings applied on a server whose settings differed, by result (ok, failed: the client's session was ended), transaction mode.",
		}, []string{"result"}),
		poolLoginFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_login_failures_total",
			Help: "Server logins of the pools that failed, by SQLSTATE (the server's, such as 57P03 while it starts or stops; 08001 when it could not be reached), transaction mode.",
		}, []string{"sqlstate"}),
		poolLoginRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_login_retries_total",
			Help: "Server logins started again after a failed one (100 ms after it, doubling while they fail, up to server_login_retry), transaction mode.",
		}),
		poolRecovery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_login_recovery_seconds",
			Help: "How long a pool's server logins failed: from the first failed login to the next one that succeeded, transaction mode.",
			// 50 ms to about 7 minutes.
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		poolNoServer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "pool_no_server_total",
			Help: "Clients closed for want of a server connection, by the SQLSTATE they were answered with (a failed server login's; 53300 at query_wait_timeout), transaction mode.",
		}, []string{"sqlstate"}),
		sessionRefreshes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "session_refreshes_total",
			Help: "Queries the proxy ran to re-read a session's search_path, ttlproxy.ttl, role and temporary tables after a statement that may have changed them.",
		}),
	}
	for _, r := range cancelResults {
		m.cancelResults.WithLabelValues(r) // exported at 0 before the first
	}
	for _, r := range pinReasons {
		m.poolPinned.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{
		m.clientConnections, m.clientConnectionsTotal, statements, m.rewriteDuration,
		m.rewriteCacheHits, m.upstreamErrors, m.cancelRequests, m.cancelResults, m.sessionRefreshes, m.refused, m.acceptErrors, timeouts, m.rejections,
		m.ddlFlowing, m.ddlEvents, m.ddlReads, m.ddlClosed, m.ttlMissing,
		m.poolWait, m.poolPins, m.poolPinned, m.poolPinRefusals, m.poolReadbacks, m.poolApplies,
		m.poolLoginFailures, m.poolLoginRetries, m.poolRecovery, m.poolNoServer,
	}
	if rw != nil {
		stats := func() rewrite.Stats {
			m.retiredMu.Lock()
			defer m.retiredMu.Unlock()
			cur := rw().Stats()
			return rewrite.Stats{ShapeHits: m.retired.ShapeHits + cur.ShapeHits, ShapeMismatches: m.retired.ShapeMismatches + cur.ShapeMismatches}
		}
		collectors = append(collectors,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace: namespace, Subsystem: subsystem,
				Name: "rewrite_shape_hits_total",
				Help: "Statements rewritten from the template of an earlier statement of the same shape (differing only in literals), without parsing.",
			}, func() float64 { return float64(stats().ShapeHits) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace: namespace, Subsystem: subsystem,
				Name: "rewrite_shape_mismatches_total",
				Help: "Shape templates that a full rewrite of a later statement contradicted (each shape is then cached by exact text); anything but 0 is a bug to report.",
			}, func() float64 { return float64(stats().ShapeMismatches) }),
		)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: registering metrics: %w", err)
		}
	}
	return m, nil
}

// retire adds the shape counters of rw, replaced by a reload, to the
// exported totals.
func (m *metrics) retire(rw *rewrite.Rewriter) {
	st := rw.Stats()
	m.retiredMu.Lock()
	m.retired.ShapeHits += st.ShapeHits
	m.retired.ShapeMismatches += st.ShapeMismatches
	m.retiredMu.Unlock()
}
