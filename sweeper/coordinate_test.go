package sweeper

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestInstancesShareSlices: three sweepers on one database never sweep the
// same slice at once; when the one holding it dies (its sessions
// terminated, as the server does for a process killed with SIGKILL), the
// next run of another takes it over.
func TestInstancesShareSlices(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "shared", 3000, 10, 0)
	rules := []ttl.Rule{sessionsRule("shared")}
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry(), prometheus.NewRegistry()}
	var sw []*Sweeper
	for i, name := range []string{"sweeper_a", "sweeper_b", "sweeper_c"} {
		sw = append(sw, e.newSweeper(t, Config{DSN: e.dsn + "&application_name=" + name, Rules: rules,
			BatchSize: 100, Registerer: regs[i]}))
	}
	held, release := make(chan struct{}), make(chan struct{})
	first := true
	sw[0].beforeBatch = func(context.Context, string) {
		if first {
			first = false
			close(held)
			<-release
		}
	}
	ctxA, killA := context.WithCancel(e.ctx)
	defer killA()
	errA := make(chan error, 1)
	go func() {
		res, err := sw[0].RunOnce(ctxA)
		if err == nil {
			err = res.Errors["public.shared"]
		}
		errA <- err
	}()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the first sweeper did not start")
	}
	for i, s := range sw[1:] {
		res, err := s.RunOnce(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := res.Deleted["public.shared"]; n != 0 {
			t.Errorf("sweeper %d deleted %d rows from a slice another held", i+1, n)
		}
		if got := testutil.ToFloat64(s.m.slicesSkipped.WithLabelValues("public.shared")); got != 1 {
			t.Errorf("sweeper %d skipped %v slices, want 1", i+1, got)
		}
	}
	if got := testutil.ToFloat64(sw[0].m.slicesHeld.WithLabelValues("public.shared")); got != 1 {
		t.Errorf("the first sweeper holds %v slices, want 1", got)
	}
	if st := sw[0].Status(); len(st) != 1 || st[0].SlicesHeld != 1 {
		t.Errorf("the first sweeper's status %+v, want one slice held", st)
	}
	if st := sw[1].Status(); len(st) != 1 || st[0].SlicesSkipped != 1 || st[0].Deleted != 0 || st[0].LastSwept.IsZero() {
		t.Errorf("the second sweeper's status %+v, want one slice skipped", st)
	}
	// The first one dies: the server ends its sessions, and the lock goes
	// with them; the process does nothing more. (The timeout makes
	// pg_terminate_backend wait until the backends are gone, PostgreSQL
	// 14+.)
	e.exec(t, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = 'sweeper_a'")
	killA()
	close(release)
	select {
	case err := <-errA:
		if err == nil {
			t.Error("the first sweeper's run went on after its sessions were terminated")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first sweeper's run did not end")
	}
	res, err := sw[1].RunOnce(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Deleted["public.shared"]; n != 3000 {
		t.Errorf("the second sweeper took over %d rows, want 3000", n)
	}
	if st := sw[1].Status(); len(st) != 1 || st[0].Deleted != 3000 || st[0].SlicesSkipped != 0 || st[0].SlicesHeld != 0 || st[0].Backlog != 0 {
		t.Errorf("the second sweeper's status after the takeover %+v", st)
	}
	if got := e.count(t, "shared"); got != 10 {
		t.Errorf("%d rows left, want 10", got)
	}
}
