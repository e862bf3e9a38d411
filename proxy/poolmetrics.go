package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/ttlproxy/ttlproxy/proxy/internal/metrics"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// The metrics of transaction pooling (docs/design/pooling.md §6): what is
// counted as it happens (waits, pins, settings read back and applied) is in
// metrics; the pools' servers and waiting clients are read at each scrape
// (poolCollector), one series per pool and state, bounded by the pools.

var (
	poolServersDesc = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, metrics.Subsystem, "pool_servers"),
		"Server connections of each pool (database, user) by state: active (held by a client), idle, login (being opened). Transaction mode.",
		[]string{"database", "user", "state"}, nil)
	poolWaitingDesc = prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, metrics.Subsystem, "pool_waiting_clients"),
		"Clients waiting for a server connection of each pool (database, user). Transaction mode.",
		[]string{"database", "user"}, nil)
)

// shapeStats are rw's shape-cache counters, as the metrics export them.
func shapeStats(rw *rewrite.Rewriter) metrics.ShapeStats {
	st := rw.Stats()
	return metrics.ShapeStats{Hits: st.ShapeHits, Mismatches: st.ShapeMismatches}
}

// poolCollector exports the pools' counts at scrape time.
type poolCollector struct{ srv *Server }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolServersDesc
	ch <- poolWaitingDesc
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	set := c.srv.pools
	if set == nil {
		return
	}
	// Pools of one (database, user) that differ in startup parameters
	// add up.
	type dbUser struct{ db, user string }
	sums := map[dbUser]poolStats{}
	for _, p := range set.pools() {
		k := dbUser{p.key.database, p.key.user}
		sum := sums[k]
		sum.add(p.stats())
		sums[k] = sum
	}
	for k, st := range sums {
		ch <- prometheus.MustNewConstMetric(poolServersDesc, prometheus.GaugeValue, float64(st.active), k.db, k.user, "active")
		ch <- prometheus.MustNewConstMetric(poolServersDesc, prometheus.GaugeValue, float64(st.idle), k.db, k.user, "idle")
		ch <- prometheus.MustNewConstMetric(poolServersDesc, prometheus.GaugeValue, float64(st.logins), k.db, k.user, "login")
		ch <- prometheus.MustNewConstMetric(poolWaitingDesc, prometheus.GaugeValue, float64(st.waiting), k.db, k.user)
	}
}
