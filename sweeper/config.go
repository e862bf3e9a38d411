package sweeper

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Defaults of Config (DefaultConfig); New also applies them to Interval,
// BatchSize and BatchTimeout left zero.
const (
	// DefaultInterval is the pause between the end of one run and the start
	// of the next.
	DefaultInterval = time.Minute
	// DefaultBatchSize is the number of rows one DELETE removes at most.
	// river's job cleaner and pg_ttl_index use 10,000; a smaller batch keeps
	// row locks and WAL bursts short, which matters more for a proxy that
	// sits in front of foreground traffic.
	DefaultBatchSize = 1000
	// DefaultBatchPause is the mean fixed pause between two batches of one
	// table (jittered by ±50%): none, since the pacing (pace.go) sleeps only
	// when the database is busy. pg_ttl_index sleeps 10ms, river a random
	// 50ms–500ms.
	DefaultBatchPause = 0
	// DefaultTargetBatchDuration is the transaction time batch sizes adapt
	// to: well under the 100 ms a foreground statement should ever wait
	// for a row lock the sweeper holds.
	DefaultTargetBatchDuration = 50 * time.Millisecond
	// DefaultMaxBatchSize bounds an adapted batch: one DELETE's row locks
	// and WAL stay small even on a quiet, fast server.
	DefaultMaxBatchSize = 100_000
	// DefaultBatchTimeout is the statement timeout of one batch.
	DefaultBatchTimeout = 30 * time.Second
	// DefaultWorkers is the number of slices of a table swept at once: one,
	// so that the sweeper's load on the server stays one session's.
	DefaultWorkers = 1
)

// Config configures a Sweeper. Zero fields take the defaults above.
type Config struct {
	// DSN is the sweeper's own login as a pgx connection string (URL or
	// key=value). The password comes from the DSN, PGPASSWORD or .pgpass.
	DSN string
	// Rules are the TTL tables to sweep.
	Rules []ttl.Rule
	// Interval is the pause between the end of one run and the start of the
	// next; default DefaultInterval.
	Interval time.Duration
	// BatchSize is the number of rows one DELETE removes at most; default
	// DefaultBatchSize. With TargetBatchDuration it is the first batch's
	// size, which then adapts.
	BatchSize int
	// TargetBatchDuration, when positive, makes batch sizes adapt so that
	// each batch takes about this long (pace.go), up to MaxBatchSize; 0
	// keeps BatchSize fixed. DefaultConfig sets DefaultTargetBatchDuration.
	TargetBatchDuration time.Duration
	// MaxBatchSize bounds an adapted batch; 0 means DefaultMaxBatchSize.
	MaxBatchSize int
	// MinRowsPerSecond, when positive, bounds the pacing's waits so that
	// each table's sweep deletes at least this many rows per second while
	// it has rows to delete, however the foreground latency rises: progress
	// the operator puts before the foreground's tail latency (pace.go).
	// 0 (the default) lets the pacing back off to a 32nd of the time.
	MinRowsPerSecond float64
	// Workers is the number of slices of one table swept at once, each on
	// connections of its own (two per worker); 0 means DefaultWorkers.
	Workers int
	// DropExpiredPartitions makes a run first detach and drop the
	// partitions of a column rule's table, range-partitioned on its expiry
	// column, whose upper bound is expired (partition.go).
	DropExpiredPartitions bool
	// ForegroundLatency, when set, reports the latency of the foreground
	// statements the proxy relays now (for example a moving median over the
	// last seconds); 0 means unknown. It is called at the start of a run
	// and after every batch, from
	// the sweeper's goroutines, and must return at once. When it rises a
	// quarter over its value at the start of the run, batches shrink and
	// the sweeper backs off (pace.go).
	ForegroundLatency func() time.Duration
	// CDCOrigin, when set, is the replication origin the sweeper's deletes
	// carry, for change-data-capture consumers to filter them (origin.go).
	CDCOrigin string
	// DialFunc, when set, dials every connection of the sweeper (its pool,
	// and the connections of index builds and partition drops), so that
	// they carry the proxy's upstream_tcp keepalive and TCP_USER_TIMEOUT;
	// nil is pgconn's dialer.
	DialFunc pgconn.DialFunc
	// BatchPause is the mean pause between batches; 0 means none
	// (DefaultConfig sets DefaultBatchPause); negative is an error.
	BatchPause time.Duration
	// BatchTimeout is the statement timeout of one batch; default
	// DefaultBatchTimeout. After repeated timeouts on a table its batch size
	// is halved.
	BatchTimeout time.Duration
	// Logger receives the sweeper's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the sweeper's metrics; nil means no metrics.
	// Ignored when Metrics is set.
	Registerer prometheus.Registerer
	// Metrics, when set, are the collectors the sweeper reports to, shared
	// with the sweepers built before it (NewMetrics): counters go on from
	// where the last one left them.
	Metrics *Metrics
}

// DefaultConfig returns a Config with every tuning field at its default;
// DSN and Rules are left to the caller.
func DefaultConfig() Config {
	return Config{
		Interval:            DefaultInterval,
		BatchSize:           DefaultBatchSize,
		BatchPause:          DefaultBatchPause,
		BatchTimeout:        DefaultBatchTimeout,
		TargetBatchDuration: DefaultTargetBatchDuration,
		MaxBatchSize:        DefaultMaxBatchSize,
		Workers:             DefaultWorkers,
	}
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchTimeout <= 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.MaxBatchSize <= 0 {
		c.MaxBatchSize = DefaultMaxBatchSize
	}
	if c.MaxBatchSize < c.BatchSize {
		c.MaxBatchSize = c.BatchSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validateRule reports a rule the sweeper cannot build SQL for.
func validateRule(r *ttl.Rule) error {
	if err := r.Validate(); err != nil {
		return err
	}
	switch r.RuleKind() {
	case ttl.KindColumn:
		switch r.ColumnType {
		case "", ttl.TypeTimestamptz, ttl.TypeTimestamp, ttl.TypeDate,
			ttl.TypeUnixSeconds, ttl.TypeUnixMilliseconds,
			ttl.TypeUnixMicroseconds, ttl.TypeUnixNanoseconds:
		default:
			return fmt.Errorf("table %s: unknown column type %q", r.QualifiedName(), r.ColumnType)
		}
	case ttl.KindDerived:
		if r.BaseColumn == "" {
			return fmt.Errorf("table %s: derived rule without a base column", r.QualifiedName())
		}
	case ttl.KindSidecar:
		if r.SidecarTable == "" {
			return fmt.Errorf("table %s: sidecar rule without a registry table", r.QualifiedName())
		}
		if len(r.KeyColumns) == 0 {
			return fmt.Errorf("table %s: sidecar rule without key columns", r.QualifiedName())
		}
	case ttl.KindNone:
		// Expiring columns only: no row statements to build.
	default:
		return fmt.Errorf("table %s: unknown rule kind %q", r.QualifiedName(), r.Kind)
	}
	return nil
}
