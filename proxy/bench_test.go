package proxy

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// BenchmarkRelay measures one round trip of a simple-protocol SELECT 1
// straight to the server and through the proxy (with the real rewriter and
// one TTL rule, so the statement takes the rewriter's fast path).
func BenchmarkRelay(b *testing.B) {
	benchmarkRoundTrip(b, func(ctx context.Context, c *pgconn.PgConn) error {
		_, err := c.Exec(ctx, "SELECT 1").ReadAll()
		return err
	})
}

// BenchmarkRelayPrepared is the same with a prepared statement (Bind,
// Execute, Sync): nothing to rewrite, pure relay.
func BenchmarkRelayPrepared(b *testing.B) {
	benchmarkRoundTrip(b, func(ctx context.Context, c *pgconn.PgConn) error {
		return c.ExecPrepared(ctx, "bench", nil, nil, nil).Read().Err
	})
}

func benchmarkRoundTrip(b *testing.B, roundTrip func(context.Context, *pgconn.PgConn) error) {
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := startProxy(b, Config{Rewriter: rw, rewriter: rw})
	for _, target := range []struct{ name, connString string }{
		{"direct", pgtest.Server(b).ConnString("postgres")},
		{"proxy", p.connString(b, "postgres")},
	} {
		b.Run(target.name, func(b *testing.B) {
			ctx := context.Background()
			conn, err := pgconn.Connect(ctx, target.connString)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Prepare(ctx, "bench", "SELECT 1", nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := roundTrip(ctx, conn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
