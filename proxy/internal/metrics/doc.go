// Package metrics owns the proxy's Prometheus metrics (ttlproxy_proxy_…):
// their names, help texts, buckets and registration, and the shape-cache
// counters that stay monotonic across a reload (Retire). The proxy updates
// the fields of a Set as events happen.
//
// It knows nothing of sessions, pools or the rewriter: label values known in
// advance (cancel results, pin reasons) and the rewriter's counters are
// passed in. It must not import any package of the module.
//
// Usage:
//
//	m, err := metrics.New(reg, metrics.Labels{CancelResults: results, PinReasons: reasons}, shapes)
//	if err != nil {
//		return err
//	}
//	m.Rewritten.Inc()
package metrics
