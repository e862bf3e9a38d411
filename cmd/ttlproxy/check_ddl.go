package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/install"
	"github.com/ttlproxy/ttlproxy/proxy"
)

// probeWait bounds the wait for check's probe notification.
const probeWait = 3 * time.Second

// checkDDLEvents reports, for conn's database, whether the DDL event
// triggers of ttlproxy install --ddl-events are installed and enabled,
// whether their notifications flow (a probe: a temporary table the
// triggers report to the proxies' channel, which proxies count without
// reading their catalog again), and how many proxies listen now.
func checkDDLEvents(ctx context.Context, conn *pgx.Conn, cfg *config.Config) (tableReport, error) {
	var db, version string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_database()::text, pg_catalog.version()").Scan(&db, &version); err != nil {
		return tableReport{}, err
	}
	rep := tableReport{Table: "database " + db, Rule: "DDL events"}
	add := func(check, status, detail string) {
		rep.Checks = append(rep.Checks, checkResult{Check: check, Status: status, Detail: detail})
	}
	ttl := cfg.CatalogTTL
	if ttl == 0 {
		ttl = proxy.DefaultCatalogTTL
	}
	window := fmt.Sprintf("DDL made outside the proxy (a view over a TTL table, say) reaches sessions only within catalog_ttl (%s), and a session inside a transaction block at the block's end", ttl)
	if strings.Contains(version, "-YB-") {
		add("event triggers", checkWarn, "YugabyteDB: DDL events are not used; "+window)
		return rep, nil
	}
	rows, err := conn.Query(ctx, `SELECT evtname::text, evtenabled::text FROM pg_catalog.pg_event_trigger
WHERE evtname IN ($1, $2) ORDER BY 1`, install.DDLCommandEndTrigger, install.SQLDropTrigger)
	if err != nil {
		return tableReport{}, err
	}
	state := map[string]string{}
	for rows.Next() {
		var name, enabled string
		if err := rows.Scan(&name, &enabled); err != nil {
			return tableReport{}, err
		}
		state[name] = enabled
	}
	if err := rows.Err(); err != nil {
		return tableReport{}, err
	}
	var missing, disabled []string
	for _, name := range []string{install.DDLCommandEndTrigger, install.SQLDropTrigger} {
		switch state[name] {
		case "":
			missing = append(missing, name)
		case "O", "A":
		default: // D, or R: fires only under session_replication_role = replica
			disabled = append(disabled, name)
		}
	}
	switch {
	case len(missing) > 0:
		add("event triggers", checkWarn, "not installed ("+strings.Join(missing, ", ")+"): "+window+"; run ttlproxy install --ddl-events")
	case len(disabled) > 0:
		add("event triggers", checkWarn, "disabled ("+strings.Join(disabled, ", ")+"): "+window+"; run ttlproxy install --ddl-events again")
	default:
		add("event triggers", checkOK, install.DDLCommandEndTrigger+", "+install.SQLDropTrigger)
		status, detail := probeDDLEvents(ctx, conn)
		add("notifications", status, detail)
	}
	var listeners int
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity
WHERE datname = pg_catalog.current_database() AND application_name = $1`, proxy.DDLListenerApplicationName).Scan(&listeners); err != nil {
		return tableReport{}, err
	}
	if listeners > 0 {
		add("proxies listening", checkOK, fmt.Sprintf("%d now", listeners))
	} else {
		add("proxies listening", checkOK, "none now: a running ttlproxy listens once a session uses this database, with ddl_events_dsn or else sweeper.dsn")
	}
	return rep, nil
}

// probeDDLEvents creates and drops check's temporary probe table while
// listening on the proxies' channel, and reports whether the triggers'
// notification arrived.
func probeDDLEvents(ctx context.Context, conn *pgx.Conn) (status, detail string) {
	if _, err := conn.Exec(ctx, "LISTEN "+install.DDLChannel); err != nil {
		return checkWarn, "could not listen: " + err.Error()
	}
	defer func() {
		// The probe's verdict stands whether or not UNLISTEN succeeds.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN "+install.DDLChannel)
	}()
	start := time.Now()
	if _, err := conn.Exec(ctx, "CREATE TEMP TABLE "+install.ProbeTable+" (); DROP TABLE "+install.ProbeTable); err != nil {
		return checkWarn, "could not probe (a temporary table): " + err.Error()
	}
	wctx, cancel := context.WithTimeout(ctx, probeWait)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			return checkWarn, fmt.Sprintf("no notification within %s of a probe DDL: the proxies would not hear of DDL; is the ttlproxy.%s function intact?", probeWait, install.DDLFunction)
		}
		if n.Payload == install.ProbePayload {
			return checkOK, fmt.Sprintf("a probe DDL's notification arrived in %s", time.Since(start).Round(time.Millisecond))
		}
	}
}
