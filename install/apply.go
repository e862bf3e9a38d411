package install

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// LockTimeout bounds Apply's wait for each table lock. CREATE and DROP
// TRIGGER take a SHARE ROW EXCLUSIVE lock on the table; queued behind a long
// transaction, that request would block every other writer of the table
// until it is granted, so Apply gives up instead (SQLSTATE 55P03) and can be
// run again.
const LockTimeout = "10s"

// Apply reads the tables' unique keys, plans (see Plan) and runs the
// statements in one transaction on conn: everything is installed (or, with
// uninstall, removed) or nothing is. It also drops what an earlier install
// left for tables no longer among rules: such a trigger would go on deleting
// rows by a rule that no longer applies, so one database has one
// configuration's triggers. It returns what it did, for printing:
// first one "-- " comment line per unique index left out (see Skipped), then
// the statements run, without terminating semicolons. The role on conn owns
// the functions, whose SECURITY DEFINER deletes run with its privileges: it
// needs DELETE and SELECT on the tables (and on sidecar registries), and
// TRIGGER on the tables, as their owner has. Errors name the table.
func Apply(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule, uninstall bool) ([]string, error) {
	return run(ctx, conn, rules, uninstall, true)
}

// Preview is Apply without changing anything (for --dry-run): it reads the
// catalog in a read-only transaction and returns what Apply would run.
func Preview(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule, uninstall bool) ([]string, error) {
	return run(ctx, conn, rules, uninstall, false)
}

func run(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule, uninstall, execute bool) (out []string, err error) {
	opts := pgx.TxOptions{}
	if !execute {
		opts.AccessMode = pgx.ReadOnly
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("beginning a transaction: %w", err)
	}
	defer func() {
		if err != nil {
			// The error that made us roll back is the one to report; a
			// failed rollback ends the connection's transaction anyway.
			_ = tx.Rollback(ctx)
		}
	}()
	if execute {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+LockTimeout+"'"); err != nil {
			return nil, fmt.Errorf("setting lock_timeout: %w", err)
		}
	}
	// The keys are read in the transaction that installs the triggers, so
	// a unique index added meanwhile is either seen or waits for us (CREATE
	// INDEX and CREATE TRIGGER take conflicting locks).
	var keys map[string][][]string
	if !uninstall {
		var skipped []Skipped
		if keys, skipped, err = readKeys(ctx, tx, rules); err != nil {
			return nil, err
		}
		for _, s := range skipped {
			out = append(out, "-- "+s.String())
		}
	}
	steps, err := plan(rules, keys, uninstall)
	if err != nil {
		return nil, err
	}
	stale, err := readStale(ctx, tx, rules)
	if err != nil {
		return nil, err
	}
	steps = append(stale, steps...)
	for _, s := range steps {
		if execute {
			if _, err := tx.Exec(ctx, s.sql); err != nil {
				if s.table != "" {
					return nil, fmt.Errorf("table %s: %w", s.table, err)
				}
				return nil, err
			}
		}
		out = append(out, s.sql)
	}
	if !execute {
		return out, tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	return out, nil
}
