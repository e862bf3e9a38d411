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

// checkAuthQuery reports, for conn's database, whether the auth query
// function of ttlproxy install --auth-query is installed and safe: SECURITY
// DEFINER owned by a superuser (it reads pg_authid), search_path pinned (a
// caller's search_path could otherwise redirect what it reads), not
// executable by PUBLIC (any login could read every password verifier). Not
// installed is fine: only an auth_query that calls it needs it.
func checkAuthQuery(ctx context.Context, conn *pgx.Conn) (tableReport, error) {
	var (
		db                    string
		installed             bool
		secdef, super, public bool
		config, grantees      string
	)
	err := conn.QueryRow(ctx, `SELECT pg_catalog.current_database()::text, p.oid IS NOT NULL,
  COALESCE(p.prosecdef, false),
  COALESCE((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = p.proowner), false),
  COALESCE(pg_catalog.array_to_string(p.proconfig, ';'), ''),
  COALESCE(EXISTS (SELECT FROM pg_catalog.aclexplode(COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
                   WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'), false),
  COALESCE((SELECT pg_catalog.string_agg(a.grantee::regrole::text, ', ' ORDER BY 1)
            FROM pg_catalog.aclexplode(p.proacl) a
            WHERE a.grantee NOT IN (0, p.proowner) AND a.privilege_type = 'EXECUTE'), '')
FROM (SELECT pg_catalog.to_regprocedure($1) AS fn) f
LEFT JOIN pg_catalog.pg_proc p ON p.oid = f.fn`, install.AuthQuerySignature).Scan(&db, &installed, &secdef, &super, &config, &public, &grantees)
	if err != nil {
		return tableReport{}, err
	}
	rep := tableReport{Table: "database " + db, Rule: "auth query"}
	if !installed {
		rep.Checks = append(rep.Checks, checkResult{Check: "auth query function", Status: checkOK,
			Detail: "not installed: needed only by an auth_query that calls it (ttlproxy install --auth-query, in the auth_dsn's database)"})
		return rep, nil
	}
	var problems []string
	if !secdef {
		problems = append(problems, "not SECURITY DEFINER")
	}
	if !super {
		problems = append(problems, "its owner is not a superuser, so it cannot read pg_authid")
	}
	if !strings.HasPrefix(config, "search_path=") && !strings.Contains(config, ";search_path=") {
		problems = append(problems, "search_path is not pinned")
	}
	if public {
		problems = append(problems, "PUBLIC may execute it")
	}
	if grantees == "" {
		grantees = "no login but its owner"
	}
	if len(problems) > 0 {
		rep.Checks = append(rep.Checks, checkResult{Check: "auth query function", Status: checkFail,
			Detail: install.AuthQuerySignature + ": " + strings.Join(problems, "; ") + "; run ttlproxy install --auth-query again"})
		return rep, nil
	}
	rep.Checks = append(rep.Checks, checkResult{Check: "auth query function", Status: checkOK,
		Detail: install.AuthQuerySignature + ": SECURITY DEFINER, search_path pinned, EXECUTE: " + grantees})
	return rep, nil
}
