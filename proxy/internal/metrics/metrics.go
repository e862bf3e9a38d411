package metrics

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Set is the proxy's metrics, created even without a Registerer so the hot
// path never checks for nil; unregistered collectors cost the same few
// nanoseconds. The fields are the proxy's to update.
type Set struct {
	ClientConnections      prometheus.Gauge
	ClientConnectionsTotal prometheus.Counter
	Passthrough            prometheus.Counter
	Rewritten              prometheus.Counter
	Rejected               prometheus.Counter
	RewriteDuration        prometheus.Histogram
	RewriteCacheHits       prometheus.Counter
	UpstreamErrors         prometheus.Counter
	CancelRequests         prometheus.Counter
	CancelResults          *prometheus.CounterVec
	SessionRefreshes       prometheus.Counter
	Refused                prometheus.Counter
	AcceptErrors           *prometheus.CounterVec
	Rejections             *prometheus.CounterVec
	// retired sums the shape counters of the rewriters a reload replaced.
	retiredMu      sync.Mutex
	retired        ShapeStats
	LoginTimeouts  prometheus.Counter
	IdleTimeouts   prometheus.Counter
	IdleTxTimeouts prometheus.Counter
	// DDL events, by database.
	DDLFlowing *prometheus.GaugeVec
	DDLEvents  *prometheus.CounterVec
	DDLReads   *prometheus.CounterVec
	DDLClosed  prometheus.Counter
	TTLMissing *prometheus.GaugeVec
	// Transaction pooling.
	PoolWait        prometheus.Histogram
	PoolPins        *prometheus.CounterVec
	PoolPinned      *prometheus.GaugeVec
	PoolPinRefusals prometheus.Counter
	PoolReadbacks   prometheus.Counter
	PoolApplies     *prometheus.CounterVec
	// Server restarts as a pool sees them.
	PoolLoginFailures *prometheus.CounterVec
	PoolLoginRetries  prometheus.Counter
	PoolRecovery      prometheus.Histogram
	PoolNoServer      *prometheus.CounterVec
}

// The metrics' names are ttlproxy_proxy_….
const (
	Namespace = "ttlproxy"
	Subsystem = "proxy"
)

// ShapeStats are a rewriter's shape-cache counters (rewrite.Stats).
type ShapeStats struct{ Hits, Mismatches uint64 }

// Labels are the values of labels known in advance, exported at 0 before
// their first event.
type Labels struct {
	// CancelResults are the results of a CancelRequest.
	CancelResults []string
	// PinReasons are the reasons a client is pinned to its server.
	PinReasons []string
}

// New builds the metrics and registers them with reg (none when reg is
// nil). shapes, when set, returns the current rewriter's shape-cache
// counters, which are exported (Retire keeps them monotonic across a
// reload). An error is a failed registration.
func New(reg prometheus.Registerer, labels Labels, shapes func() ShapeStats) (*Set, error) {
	statements := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "statements_total",
		Help: "Query and Parse statements by outcome: passthrough (sent unchanged), rewritten, rejected.",
	}, []string{"outcome"})
	timeouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "client_timeouts_total",
		Help: "Clients closed by a timeout: login (client_login_timeout), idle_session (idle_session_timeout) or idle_transaction (idle_transaction_timeout).",
	}, []string{"reason"})
	m := &Set{
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "rejections_total",
			Help: "Statements rejected by the proxy, by the SQLSTATE the client got.",
		}, []string{"sqlstate"}),
		Refused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "client_connections_refused_total",
			Help: "Clients refused at startup because max_client_connections were open (SQLSTATE 53300).",
		}),
		AcceptErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "accept_errors_total",
			Help: "Transient errors accepting client connections, retried after a backoff, by reason: emfile (process out of file descriptors), enfile (system out of file descriptors), enobufs, enomem, timeout.",
		}, []string{"reason"}),
		LoginTimeouts:  timeouts.WithLabelValues("login"),
		IdleTimeouts:   timeouts.WithLabelValues("idle_session"),
		IdleTxTimeouts: timeouts.WithLabelValues("idle_transaction"),
		ClientConnections: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "client_connections",
			Help: "Client connections currently open.",
		}),
		ClientConnectionsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "client_connections_total",
			Help: "Client connections accepted (cancel requests included).",
		}),
		Passthrough: statements.WithLabelValues("passthrough"),
		Rewritten:   statements.WithLabelValues("rewritten"),
		Rejected:    statements.WithLabelValues("rejected"),
		RewriteDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "rewrite_duration_seconds",
			Help: "Time spent rewriting one Query or Parse text.",
			// 1µs to ~4ms: the fast path is sub-microsecond, a cached
			// rewrite a few µs, a parse and splice tens to hundreds of µs.
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 13),
		}),
		RewriteCacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "rewrite_cache_hits_total",
			Help: "Rewrites answered from the rewrite cache.",
		}),
		UpstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "upstream_errors_total",
			Help: "Failed upstream dials and upstream connections lost mid-session.",
		}),
		CancelRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "cancel_requests_total",
			Help: "CancelRequests received; ttlproxy_proxy_cancel_results_total says what became of them.",
		}),
		CancelResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "cancel_results_total",
			Help: "CancelRequests by result: forwarded (to the server running the statement), to_peer (to the instance that issued the key, transaction mode), stale (the key's client ran no statement), unknown (no client of the instance has the key, or no peer its id), peer_down (the key's peer could not be reached).",
		}, []string{"result"}),
		DDLFlowing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "ddl_events_flowing",
			Help: "1 while the proxy listens for the database's DDL events (ttlproxy install --ddl-events) and its event triggers are installed; 0 otherwise, when DDL made outside the proxy reaches sessions within catalog_ttl.",
		}, []string{"database"}),
		DDLEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "ddl_events_total",
			Help: "DDL event notifications received, by database.",
		}, []string{"database"}),
		DDLReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "ddl_catalog_reads_total",
			Help: "Catalog reads on the proxy's own connection after DDL events (at most one per database per 100 ms), by database and result (ok, failed).",
		}, []string{"database", "result"}),
		DDLClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "ddl_sessions_closed_total",
			Help: "Sessions closed inside a transaction block because the catalog changed and could not be read again within 5 s.",
		}),
		TTLMissing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "ttl_tables_missing",
			Help: "TTL rule tables of the database that its catalog, read after DDL events, no longer holds under the rule's name, or that lack a column their rule reads (renamed, moved, dropped or altered outside the proxy), by database.",
		}, []string{"database"}),
		PoolWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_wait_seconds",
			Help: "How long a client waited for a server connection at the start of a transaction (0 when one was idle), transaction mode.",
			// 50 µs to about 3 minutes (query_wait_timeout's default is 2).
			Buckets: prometheus.ExponentialBuckets(50e-6, 2.5, 17),
		}),
		PoolPins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_pins_total",
			Help: "Clients pinned to their server connection beyond a transaction, by the reason of the pin (temp, advisory_lock, listen, hold_cursor, sql_prepare, session_authorization: until the server shows the state gone; load, prepared, function_call, dblink, settings: for the client's life), transaction mode.",
		}, []string{"reason"}),
		PoolPinned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_pinned_clients",
			Help: "Clients keeping their server connection now, by the reason they were pinned for, transaction mode.",
		}, []string{"reason"}),
		PoolPinRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_pin_refusals_total",
			Help: "Statements refused (53000, not run) because they would pin a client while max_pinned_connections clients of its pool were pinned, transaction mode.",
		}),
		PoolReadbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_settings_readbacks_total",
			Help: "Session settings read back from a server before its release, after a transaction that may have changed them, transaction mode.",
		}),
		PoolApplies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_settings_applies_total",
			Help: "Clients' settings applied on a server whose settings differed, by result (ok, failed: the client's session was ended), transaction mode.",
		}, []string{"result"}),
		PoolLoginFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_login_failures_total",
			Help: "Server logins of the pools that failed, by SQLSTATE (the server's, such as 57P03 while it starts or stops; 08001 when it could not be reached), transaction mode.",
		}, []string{"sqlstate"}),
		PoolLoginRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_login_retries_total",
			Help: "Server logins started again after a failed one (100 ms after it, doubling while they fail, up to server_login_retry), transaction mode.",
		}),
		PoolRecovery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_login_recovery_seconds",
			Help: "How long a pool's server logins failed: from the first failed login to the next one that succeeded, transaction mode.",
			// 50 ms to about 7 minutes.
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}),
		PoolNoServer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "pool_no_server_total",
			Help: "Clients closed for want of a server connection, by the SQLSTATE they were answered with (a failed server login's; 53300 at query_wait_timeout), transaction mode.",
		}, []string{"sqlstate"}),
		SessionRefreshes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: Subsystem,
			Name: "session_refreshes_total",
			Help: "Queries the proxy ran to re-read a session's search_path, ttlproxy.ttl, role and temporary tables after a statement that may have changed them.",
		}),
	}
	for _, r := range labels.CancelResults {
		m.CancelResults.WithLabelValues(r) // exported at 0 before the first
	}
	for _, r := range labels.PinReasons {
		m.PoolPinned.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	collectors := []prometheus.Collector{
		m.ClientConnections, m.ClientConnectionsTotal, statements, m.RewriteDuration,
		m.RewriteCacheHits, m.UpstreamErrors, m.CancelRequests, m.CancelResults, m.SessionRefreshes, m.Refused, m.AcceptErrors, timeouts, m.Rejections,
		m.DDLFlowing, m.DDLEvents, m.DDLReads, m.DDLClosed, m.TTLMissing,
		m.PoolWait, m.PoolPins, m.PoolPinned, m.PoolPinRefusals, m.PoolReadbacks, m.PoolApplies,
		m.PoolLoginFailures, m.PoolLoginRetries, m.PoolRecovery, m.PoolNoServer,
	}
	if shapes != nil {
		stats := func() ShapeStats {
			m.retiredMu.Lock()
			defer m.retiredMu.Unlock()
			cur := shapes()
			return ShapeStats{Hits: m.retired.Hits + cur.Hits, Mismatches: m.retired.Mismatches + cur.Mismatches}
		}
		collectors = append(collectors,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace: Namespace, Subsystem: Subsystem,
				Name: "rewrite_shape_hits_total",
				Help: "Statements rewritten from the template of an earlier statement of the same shape (differing only in literals), without parsing.",
			}, func() float64 { return float64(stats().Hits) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Namespace: Namespace, Subsystem: Subsystem,
				Name: "rewrite_shape_mismatches_total",
				Help: "Shape templates that a full rewrite of a later statement contradicted (each shape is then cached by exact text); anything but 0 is a bug to report.",
			}, func() float64 { return float64(stats().Mismatches) }),
		)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: registering metrics: %w", err)
		}
	}
	return m, nil
}

// Retire adds the shape counters of a rewriter a reload replaced to the
// exported totals.
func (m *Set) Retire(st ShapeStats) {
	m.retiredMu.Lock()
	m.retired.Hits += st.Hits
	m.retired.Mismatches += st.Mismatches
	m.retiredMu.Unlock()
}
