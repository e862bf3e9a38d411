package proxy

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMetrics(t *testing.T) {
	p := startProxy(t, Config{})
	conn := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, conn, "SELECT 1")
	mustExec(t, conn, "SELECT 2")
	mustExec(t, conn, "SELECT 'original'")
	if _, err := conn.Exec(testContext(t), "SELECT * FROM reject_me"); err == nil {
		t.Fatal("not rejected")
	}
	want := map[string]float64{"passthrough": 2, "rewritten": 1, "rejected": 1}
	for outcome, n := range want {
		if got := labelledValue(t, p.reg, "ttlproxy_proxy_statements_total", "outcome", outcome); got != n {
			t.Errorf("statements_total{outcome=%q} = %v, want %v", outcome, got, n)
		}
	}
	if got := histogramCount(t, p.reg, "ttlproxy_proxy_rewrite_duration_seconds"); got != 4 {
		t.Errorf("rewrite_duration_seconds count = %d, want 4", got)
	}
	if got := counterValue(t, p.reg, "ttlproxy_proxy_client_connections"); got != 1 {
		t.Errorf("client_connections = %v", got)
	}
	if got := counterValue(t, p.reg, "ttlproxy_proxy_client_connections_total"); got != 1 {
		t.Errorf("client_connections_total = %v", got)
	}
	for _, name := range []string{
		"ttlproxy_proxy_rewrite_cache_hits_total",
		"ttlproxy_proxy_upstream_errors_total",
		"ttlproxy_proxy_cancel_requests_total",
	} {
		if !hasMetric(t, p.reg, name) {
			t.Errorf("%s not registered", name)
		}
	}
}

func labelledValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func hasMetric(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return true
		}
	}
	return false
}
