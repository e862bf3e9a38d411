package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestNew(t *testing.T) {
	reg := prometheus.NewRegistry()
	shapes := ShapeStats{Hits: 3, Mismatches: 1}
	m, err := New(reg, Labels{CancelResults: []string{"forwarded", "stale"}, PinReasons: []string{"temp"}},
		func() ShapeStats { return shapes })
	if err != nil {
		t.Fatal(err)
	}
	// Known label values are exported at 0 before their first event.
	for _, c := range []struct {
		name   string
		series int
	}{
		{"ttlproxy_proxy_cancel_results_total", 2},
		{"ttlproxy_proxy_pool_pinned_clients", 1},
	} {
		if n, err := testutil.GatherAndCount(reg, c.name); err != nil || n != c.series {
			t.Errorf("%s: %d series (%v), want %d", c.name, n, err, c.series)
		}
	}

	// A reload retires the rewriter: the totals go on from what it counted.
	m.Retire(shapes)
	shapes = ShapeStats{Hits: 1}
	if got := gathered(t, reg, "ttlproxy_proxy_rewrite_shape_hits_total"); got != 4 {
		t.Errorf("shape hits after a reload = %v, want 4", got)
	}
	if got := gathered(t, reg, "ttlproxy_proxy_rewrite_shape_mismatches_total"); got != 1 {
		t.Errorf("shape mismatches after a reload = %v, want 1", got)
	}

	if _, err := New(reg, Labels{}, nil); err == nil {
		t.Error("metrics registered twice without an error")
	}
	if _, err := New(nil, Labels{}, nil); err != nil {
		t.Errorf("without a Registerer: %v", err)
	}
}

func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}
