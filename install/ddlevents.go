package install

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DDL events: an event trigger tells running proxies that DDL committed, so
// that their catalog snapshots (the TTL tables' columns, children, and the
// views and functions that read them) follow DDL made outside the proxy
// before the next statement instead of within catalog_ttl.
//
// The function ttlproxy.notify_ddl() calls pg_notify on DDLChannel at
// sql_drop and at the ddl_command_end of every command but DROP (whose
// objects sql_drop reports), unless every object the command touched is
// temporary (the proxy's catalog holds no temporary object, and an
// application creating temporary tables would otherwise make every proxy
// read its catalog again), but for ttlproxy check's probe (ProbeTable). Both triggers are ENABLE ALWAYS, so DDL run with
// session_replication_role = replica (some migration and replication tools)
// is reported too. NOTIFY is transactional: a rolled-back DDL sends nothing,
// a committed one is delivered once it is visible.
//
// Creating event triggers needs a superuser (PostgreSQL 15 and 16; from 17
// also a role granted the event trigger privilege), and they live per
// database: run the install in every database the proxy serves.

// DDLChannel is the channel notified; proxy.DDLEventsChannel is the same.
const DDLChannel = "ttlproxy_ddl"

// ProbeTable is the temporary table whose creation ttlproxy check uses to
// see notifications flow end to end: it sends ProbePayload, which proxies
// count without reading their catalog again.
const (
	ProbeTable   = "ttlproxy_ddl_probe"
	ProbePayload = "probe"
)

// DDL event trigger and function names; proxy.DDLEventTriggers are the same.
const (
	DDLCommandEndTrigger = "ttlproxy_ddl_command_end"
	SQLDropTrigger       = "ttlproxy_sql_drop"
	DDLFunction          = "notify_ddl"
)

// ddlFunctionBody is notify_ddl's plpgsql body.
const ddlFunctionBody = `BEGIN
  IF TG_EVENT = 'sql_drop' THEN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger_dropped_objects() o WHERE NOT o.is_temporary) THEN
      RETURN;
    END IF;
  ELSIF TG_TAG LIKE 'DROP %' THEN
    RETURN; -- reported by sql_drop, with what it dropped
  ELSIF EXISTS (SELECT FROM pg_catalog.pg_event_trigger_ddl_commands())
    AND NOT EXISTS (SELECT FROM pg_catalog.pg_event_trigger_ddl_commands() c
                     WHERE c.schema_name IS NULL OR c.schema_name !~ '^pg_(toast_)?temp') THEN
    IF EXISTS (SELECT FROM pg_catalog.pg_event_trigger_ddl_commands() c
                WHERE c.command_tag = 'CREATE TABLE' AND c.object_identity LIKE '%.` + ProbeTable + `') THEN
      PERFORM pg_catalog.pg_notify('` + DDLChannel + `', '` + ProbePayload + `');
    END IF;
    RETURN;
  END IF;
  PERFORM pg_catalog.pg_notify('` + DDLChannel + `', TG_TAG);
END
`

// PlanDDLEvents returns the statements that install (or, with uninstall,
// remove) the DDL event triggers, in order, for one transaction.
func PlanDDLEvents(uninstall bool) []string {
	fn := Schema + "." + DDLFunction + "()"
	if uninstall {
		return []string{
			"DROP EVENT TRIGGER IF EXISTS " + DDLCommandEndTrigger,
			"DROP EVENT TRIGGER IF EXISTS " + SQLDropTrigger,
			"DROP FUNCTION IF EXISTS " + fn,
			dropSchemaIfEmpty,
		}
	}
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + Schema,
		"CREATE OR REPLACE FUNCTION " + fn + " RETURNS event_trigger LANGUAGE plpgsql\n" +
			"SET search_path = pg_catalog, pg_temp AS " + dollarQuote(ddlFunctionBody),
		"REVOKE ALL ON FUNCTION " + fn + " FROM PUBLIC",
		"DROP EVENT TRIGGER IF EXISTS " + DDLCommandEndTrigger,
		"CREATE EVENT TRIGGER " + DDLCommandEndTrigger + " ON ddl_command_end EXECUTE FUNCTION " + fn,
		"ALTER EVENT TRIGGER " + DDLCommandEndTrigger + " ENABLE ALWAYS",
		"DROP EVENT TRIGGER IF EXISTS " + SQLDropTrigger,
		"CREATE EVENT TRIGGER " + SQLDropTrigger + " ON sql_drop EXECUTE FUNCTION " + fn,
		"ALTER EVENT TRIGGER " + SQLDropTrigger + " ENABLE ALWAYS",
	}
}

// dropSchemaIfEmpty drops schema ttlproxy unless something else lives in it.
const dropSchemaIfEmpty = `DO $ttl$
BEGIN
  DROP SCHEMA IF EXISTS ttlproxy;
EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege THEN
  NULL; -- in use by something else, or not ours: leave it
END
$ttl$`

// ApplyDDLEvents installs (or, with uninstall, removes) the DDL event
// triggers in conn's database, in one transaction, and returns the
// statements run. A server that cannot have them (YugabyteDB, where the
// proxy falls back to catalog_ttl) or a login that may not create them is an
// error that says so.
func ApplyDDLEvents(ctx context.Context, conn *pgx.Conn, uninstall bool) ([]string, error) {
	return runDDLEvents(ctx, conn, uninstall, true)
}

// PreviewDDLEvents is ApplyDDLEvents without changing anything.
func PreviewDDLEvents(ctx context.Context, conn *pgx.Conn, uninstall bool) ([]string, error) {
	return runDDLEvents(ctx, conn, uninstall, false)
}

func runDDLEvents(ctx context.Context, conn *pgx.Conn, uninstall, execute bool) ([]string, error) {
	var version string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.version()").Scan(&version); err != nil {
		return nil, fmt.Errorf("reading the server version: %w", err)
	}
	if strings.Contains(version, "-YB-") && !uninstall {
		return nil, fmt.Errorf("DDL events are not supported on YugabyteDB (event triggers and LISTEN/NOTIFY vary by release): the proxy follows DDL within catalog_ttl there")
	}
	stmts := PlanDDLEvents(uninstall)
	if !execute {
		return stmts, nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning a transaction: %w", err)
	}
	// After Commit, Rollback does nothing; before it, the error that ended
	// the transaction is the one returned.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "42501" {
				return nil, fmt.Errorf("%s: %w (creating event triggers needs a superuser)", firstLine(s), err)
			}
			return nil, fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	return stmts, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
