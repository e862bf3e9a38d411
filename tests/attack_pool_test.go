package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestAttackPoolStateInFunction: in transaction mode, state that a client
// makes inside a function, where the proxy cannot see it, must not reach
// the next client of its server connection (issue 29, class 7). Client A,
// an ordinary login with DML grants on the TTL table sessions and a schema
// of its own, calls a function of its schema that leaves one kind of
// session state behind; client B, the same role on the same pool of one
// server connection, then looks for it. The worst of them: a temporary view
// named sessions, whose fake expiry column the proxy's filter would read,
// served B every expired row of sessions from a plain SELECT.
func TestAttackPoolStateInFunction(t *testing.T) {
	role := fmt.Sprintf("atk_pool_%d", os.Getpid())
	const password = "attack pass"
	srv := pgtest.Server(t)
	admin, err := pgx.Connect(context.Background(), srv.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
		admin.Close(context.Background())
	})
	for _, q := range []string{
		"DROP ROLE IF EXISTS " + role,
		"SET password_encryption = 'scram-sha-256'",
		"CREATE ROLE " + role + " LOGIN PASSWORD '" + password + "'",
	} {
		if _, err := admin.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := newStack(t, stackOptions{
		setup: []string{
			"CREATE TABLE public.sessions (id int PRIMARY KEY, payload text, expires_at timestamptz)",
			"INSERT INTO public.sessions VALUES (1, 'live', now() + interval '1 hour'), (2, 'expired', now() - interval '1 hour')",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON public.sessions TO " + role,
			"CREATE SCHEMA atk AUTHORIZATION " + role,
			// Owned by the role: made as the role.
			"SET ROLE " + role,
			"CREATE SEQUENCE atk.seq",
			// The bodies spell the table's name backwards: the proxy
			// refuses a call of a function whose body names a TTL table.
			`CREATE FUNCTION atk.temp_view() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
				EXECUTE format('CREATE TEMP VIEW %s AS SELECT id, payload, ''infinity''::timestamptz AS expires_at FROM public.%s',
					reverse('snoisses'), reverse('snoisses'));
			END $f$`,
			`CREATE FUNCTION atk.temp_table() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
				EXECUTE format('CREATE TEMP TABLE %s (id int, payload text, expires_at timestamptz)', reverse('snoisses'));
				EXECUTE format('INSERT INTO %s VALUES (99, ''planted'', ''infinity'')', reverse('snoisses'));
			END $f$`,
			`CREATE FUNCTION atk.prepare() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
				EXECUTE format('PREPARE leak AS SELECT id, payload FROM public.%s', reverse('snoisses'));
			END $f$`,
			`CREATE FUNCTION atk.hold_cursor() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
				EXECUTE format('DECLARE leak CURSOR WITH HOLD FOR SELECT id, payload FROM public.%s', reverse('snoisses'));
			END $f$`,
			`CREATE FUNCTION atk.listen() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
				EXECUTE 'LISTEN leak';
			END $f$`,
			`CREATE FUNCTION atk.lock() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
				PERFORM pg_catalog.pg_advisory_lock(4242);
			END $f$`,
			`CREATE FUNCTION atk.settings() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
				PERFORM pg_catalog.set_config('search_path', 'atk, public', false);
				PERFORM pg_catalog.set_config('atk.planted', 'yes', false);
			END $f$`,
			`CREATE FUNCTION atk.sequence() RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
				PERFORM pg_catalog.nextval('atk.seq');
			END $f$`,
			"RESET ROLE",
		},
		rules: []ttl.Rule{{Schema: "public", Table: "sessions", DefaultTTL: time.Hour}},
		pool:  &proxy.PoolSettings{DefaultPoolSize: 1},
	})
	cfg, err := pgx.ParseConfig(s.proxied)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = role, password
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	connect := func(t *testing.T) *pgx.Conn {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("connect as %s through the proxy: %v", role, err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	ctx := context.Background()

	for _, tc := range []struct {
		name, fn string
		// probe is what B runs; want its one value.
		probe, want string
	}{
		{"temporary view named like the TTL table", "temp_view",
			"SELECT pg_catalog.string_agg(id::text, ',' ORDER BY id) FROM sessions", "1"},
		{"temporary table named like the TTL table", "temp_table",
			"SELECT pg_catalog.string_agg(id::text, ',' ORDER BY id) FROM sessions", "1"},
		{"PREPARE by EXECUTE", "prepare",
			"SELECT pg_catalog.count(*)::text FROM pg_catalog.pg_prepared_statements WHERE from_sql", "0"},
		{"WITH HOLD cursor", "hold_cursor",
			"SELECT pg_catalog.count(*)::text FROM pg_catalog.pg_cursors", "0"},
		{"LISTEN", "listen",
			"SELECT pg_catalog.count(*)::text FROM pg_catalog.pg_listening_channels()", "0"},
		{"session advisory lock", "lock",
			"SELECT pg_catalog.count(*)::text FROM pg_catalog.pg_locks WHERE locktype::text LIKE 'adv%' AND pid = pg_catalog.pg_backend_pid()", "0"},
		{"set_config(…, false)", "settings",
			"SELECT pg_catalog.current_setting('search_path') || '|' || coalesce(pg_catalog.current_setting('atk.planted', true), '')", `"$user", public|`},
		{"sequence currval", "sequence",
			"SELECT pg_catalog.currval('atk.seq')::text", "error 55000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := connect(t), connect(t)
			var pidA, pidB int
			if err := a.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid() FROM (SELECT atk."+tc.fn+"()) f").Scan(&pidA); err != nil {
				t.Fatalf("client A: atk.%s(): %v", tc.fn, err)
			}
			if err := b.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&pidB); err != nil {
				t.Fatal(err)
			}
			if pidA != pidB {
				t.Fatalf("clients A and B ran on servers %d and %d: the pool of one did not hand A's server to B", pidA, pidB)
			}
			var got string
			err := b.QueryRow(ctx, tc.probe).Scan(&got)
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				got = "error " + pe.Code
			} else if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("client B found client A's state: %s = %q, want %q", tc.probe, got, tc.want)
			}
			if strings.Contains(got, "2") && strings.Contains(tc.probe, "FROM sessions") {
				t.Error("client B was served the expired row of sessions")
			}
		})
	}
}
