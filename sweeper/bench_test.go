package sweeper

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// BenchmarkSweepVsBulk measures the sweeper against one bulk DELETE of the
// same expired rows on an identical table, with and without an index on
// the expiry column, and reports the sweeper's share of the bulk speed
// (sweep/bulk, rows per second; 1 is as fast) and its longest batch. Rows:
// SWEEP_ROWS (default 200000), half of them expired. Run it alone:
//
//	go test -run XXX -bench SweepVsBulk -benchtime 1x ./sweeper
//	SWEEP_ROWS=1000000 go test -run XXX -bench SweepVsBulk -benchtime 1x ./sweeper
func BenchmarkSweepVsBulk(b *testing.B) {
	rows := 200_000
	if v, err := strconv.Atoi(os.Getenv("SWEEP_ROWS")); err == nil && v > 0 {
		rows = v
	}
	for _, indexed := range []bool{true, false} {
		name := "index"
		if !indexed {
			name = "no_index"
		}
		b.Run(name, func(b *testing.B) {
			db := pgtest.NewDatabase(b)
			dsn := pgtest.Server(b).ConnString(db)
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			for range b.N {
				for _, t := range []string{"bulk", "swept"} {
					must(b, conn, "DROP TABLE IF EXISTS "+t)
					must(b, conn, "CREATE TABLE "+t+" (id bigint PRIMARY KEY, expires_at timestamptz, note text)")
					must(b, conn, `INSERT INTO `+t+` SELECT g, CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END, 'n'
						FROM generate_series(1, `+strconv.Itoa(rows)+`) AS g`)
					if indexed {
						must(b, conn, "CREATE INDEX ON "+t+" (expires_at)")
					}
					must(b, conn, "VACUUM ANALYZE "+t)
				}
				start := time.Now()
				must(b, conn, "DELETE FROM bulk WHERE expires_at < now()")
				bulk := time.Since(start)

				cfg := DefaultConfig()
				cfg.DSN, cfg.Rules = dsn, []ttl.Rule{{Table: "swept"}}
				s, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				var longest time.Duration
				var last time.Time
				s.beforeBatch = func(context.Context, string) { last = time.Now() }
				s.afterBatch = func(string, int64) { longest = max(longest, time.Since(last)) }
				start = time.Now()
				res, err := s.RunOnce(ctx)
				sweep := time.Since(start)
				s.Stop()
				if err != nil || res.Deleted["public.swept"] != int64(rows/2) {
					b.Fatalf("sweep deleted %v, %v", res.Deleted, err)
				}
				b.ReportMetric(bulk.Seconds()/sweep.Seconds(), "sweep/bulk")
				b.ReportMetric(float64(longest.Milliseconds()), "longest_batch_ms")
				b.ReportMetric(float64(res.Batches["public.swept"]), "batches")
				b.Logf("%d rows, %s: bulk DELETE %v, sweeper %v in %d batches (longest %v)",
					rows, name, bulk.Round(time.Millisecond), sweep.Round(time.Millisecond), res.Batches["public.swept"], longest.Round(time.Millisecond))
			}
		})
	}
}

func must(b *testing.B, conn *pgx.Conn, sql string) {
	b.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		b.Fatalf("%s: %v", sql, err)
	}
}
