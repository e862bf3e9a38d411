package tests

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/install"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestUniqueKeyCollisions checks, through the proxy, that a write whose
// unique key collides with an expired, not yet swept row behaves as if that
// row were absent once the collision triggers are installed, that a live row
// still collides, and what happens without the triggers.
func TestUniqueKeyCollisions(t *testing.T) {
	rule := sessionsRule
	rule.RefreshOnUpdate = true
	for _, installed := range []bool{true, false} {
		name := "without_triggers"
		if installed {
			name = "with_triggers"
		}
		t.Run(name, func(t *testing.T) {
			s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{rule}})
			direct := s.connect(s.direct)
			ctx := context.Background()
			if installed {
				if _, err := install.Apply(ctx, direct, []ttl.Rule{rule}, false); err != nil {
					t.Fatal(err)
				}
			}
			conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
			// Row 2 is expired; row 1 is live.
			_, err := conn.Exec(ctx, `INSERT INTO sessions (id, owner, note) VALUES (2, 9, 'reused key')`)
			if installed {
				if err != nil {
					t.Fatalf("INSERT colliding with an expired row: %v", err)
				}
				if got := ids(t, conn, `SELECT note FROM sessions WHERE id = 2`); got != "reused key" {
					t.Errorf("after the INSERT: %q", got)
				}
			} else if sqlstate(err) != "23505" {
				t.Errorf("without triggers an expired row still holds its key: err %v, want 23505", err)
			}

			// An upsert whose conflicting row is expired.
			if _, err := direct.Exec(ctx, `INSERT INTO sessions VALUES (5, 5, 'dead', now() - interval '1 hour')`); err != nil {
				t.Fatal(err)
			}
			tag, err := conn.Exec(ctx, `INSERT INTO sessions (id, owner, note) VALUES (5, 6, 'fresh')
				ON CONFLICT (id) DO UPDATE SET note = EXCLUDED.note || ' (updated)'`)
			if err != nil {
				t.Fatal(err)
			}
			got := ids(t, direct, `SELECT note || ':' || (expires_at > now())::text FROM sessions WHERE id = 5`)
			if installed {
				if tag.String() != "INSERT 0 1" || got != "fresh:true" {
					t.Errorf("upsert over an expired row: tag %q, row %q; want the new values inserted (fresh:true)", tag, got)
				}
			} else if tag.String() != "INSERT 0 0" || got != "dead:false" {
				// Without triggers the dead row is neither updated nor brought back.
				t.Errorf("upsert over an expired row without triggers: tag %q, row %q; want INSERT 0 0 and the dead row untouched", tag, got)
			}

			// DO NOTHING over an expired row.
			if _, err := direct.Exec(ctx, `INSERT INTO sessions VALUES (6, 6, 'dead', now() - interval '1 hour')`); err != nil {
				t.Fatal(err)
			}
			tag, err = conn.Exec(ctx, `INSERT INTO sessions (id, owner, note) VALUES (6, 7, 'new') ON CONFLICT DO NOTHING`)
			if err != nil {
				t.Fatal(err)
			}
			want := "INSERT 0 0"
			if installed {
				want = "INSERT 0 1"
			}
			if tag.String() != want {
				t.Errorf("DO NOTHING over an expired row: tag %q, want %q", tag, want)
			}

			// A live row still collides, and an upsert updates it.
			if _, err := conn.Exec(ctx, `INSERT INTO sessions (id, owner, note) VALUES (1, 1, 'dup')`); sqlstate(err) != "23505" {
				t.Errorf("INSERT colliding with a live row: %v, want 23505", err)
			}
			tag, err = conn.Exec(ctx, `INSERT INTO sessions (id, owner, note) VALUES (1, 1, 'x') ON CONFLICT (id) DO UPDATE SET note = 'upserted'`)
			if err != nil || tag.String() != "INSERT 0 1" {
				t.Fatalf("upsert over a live row: %q, %v", tag, err)
			}
			if got := ids(t, conn, `SELECT note FROM sessions WHERE id = 1`); got != "upserted" {
				t.Errorf("upsert over a live row left %q", got)
			}
		})
	}
}
