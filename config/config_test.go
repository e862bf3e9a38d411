package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestParseFull(t *testing.T) {
	const doc = `
listen: 0.0.0.0:7432
upstream: db.internal:5433
admin_listen: :9999
admin: {web_config_file: /etc/ttl/web.yml, enable_status: true, enable_lifecycle: false, bearer_token_file: /etc/ttl/admin-token}
tls: {cert_file: /etc/ttl/cert.pem, key_file: /etc/ttl/key.pem}
bypass_roles: [ttl_admin, Migrator]
trusted_functions: [Report.Count_All, '"MixedCase"', audit_count]
upstream_tls: {sslmode: verify-full, sslrootcert: /etc/ttl/root.pem}
upstream_tcp: {keepalives: true, keepalives_idle: 20s, keepalives_interval: 5s, keepalives_count: 4, tcp_user_timeout: 40s}
limits: {max_statement_bytes: 2048, max_nesting_depth: 50, max_message_bytes: 4096, max_client_connections: 500}
client_login_timeout: 15s
idle_session_timeout: 10m
idle_transaction_timeout: 30s
dial_timeout: 3s
shutdown_timeout: 20s
catalog_ttl: 5s
gomaxprocs: 1
ddl_events_dsn: postgres://ttl_catalog@127.0.0.1:5432/app
row_security: required
pool_mode: transaction
auth_type: md5
auth_query: SELECT username, password FROM pgbouncer.get_auth($1)
auth_dsn: postgres://ttl_auth@127.0.0.1:5432/app
default_pool_size: 10
min_pool_size: 2
reserve_pool_size: 3
reserve_pool_timeout: 2s
max_db_connections: 40
server_lifetime: 30m
server_idle_timeout: 0s
server_connect_timeout: 5s
server_login_retry: 1s
query_wait_timeout: 1m
max_pinned_connections: 4
tables:
  - table: public.sessions
    rule: column
    column: expires_at
    column_type: timestamptz
    default_ttl: 24h
    refresh_on_update: true
    create_index: true
  - table: '"App"."Events"'
    column: Expiry
    column_type: unix_ms
  - table: audit
    rule: derived
    base_column: created_at
    expire_after: 90d
  - table: tokens
    rule: derived
    base_column: issued_at
    interval_column: ttl_seconds
    interval_unit: seconds
    default_ttl: 1d12h
  - table: app.carts
    rule: sidecar
    sidecar_table: carts_ttl
    key_columns: [tenant_id, '"CartID"']
    default_ttl: 30m
sweeper:
  dsn: postgres://ttl_sweeper@127.0.0.1:5432/app
  interval: 2m
  batch_size: 500
  batch_pause: 0s
  batch_timeout: 10s
  target_batch_duration: 20ms
  max_batch_size: 5000
  workers: 4
  min_rows_per_second: 2000
  drop_expired_partitions: true
  cdc_origin: ttlproxy_sweeper
`
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Listen:                 "0.0.0.0:7432",
		Upstream:               "db.internal:5433",
		AdminListen:            ":9999",
		Admin:                  Admin{WebConfigFile: "/etc/ttl/web.yml", EnableStatus: true, BearerTokenFile: "/etc/ttl/admin-token"}, //nolint:gosec // a file name, not a credential
		TLS:                    &TLS{CertFile: "/etc/ttl/cert.pem", KeyFile: "/etc/ttl/key.pem"},
		BypassRoles:            []string{"ttl_admin", "Migrator"},
		TrustedFunctions:       []string{"report.count_all", "MixedCase", "audit_count"},
		UpstreamTLS:            &UpstreamTLS{SSLMode: "verify-full", SSLRootCert: "/etc/ttl/root.pem"},
		UpstreamTCP:            UpstreamTCP{KeepalivesIdle: 20 * time.Second, KeepalivesInterval: 5 * time.Second, KeepalivesCount: 4, TCPUserTimeout: new(40 * time.Second)},
		Limits:                 Limits{MaxStatementBytes: 2048, MaxNestingDepth: 50, MaxMessageBytes: 4096, MaxClientConnections: 500},
		ClientLoginTimeout:     15 * time.Second,
		IdleSessionTimeout:     10 * time.Minute,
		IdleTransactionTimeout: 30 * time.Second,
		DialTimeout:            3 * time.Second,
		ShutdownTimeout:        20 * time.Second,
		CatalogTTL:             5 * time.Second,
		GOMAXPROCS:             1,
		DDLEventsDSN:           "postgres://ttl_catalog@127.0.0.1:5432/app",
		RowSecurity:            RowSecurityRequired,
		PoolMode:               PoolModeTransaction,
		Auth:                   Auth{Type: "md5", Query: "SELECT username, password FROM pgbouncer.get_auth($1)", DSN: "postgres://ttl_auth@127.0.0.1:5432/app"},
		Pool: Pool{DefaultPoolSize: 10, MinPoolSize: 2, ReservePoolSize: 3, ReservePoolTimeout: 2 * time.Second, MaxDBConnections: 40,
			ServerLifetime: 30 * time.Minute, ServerIdleTimeout: new(time.Duration), ServerConnectTimeout: 5 * time.Second,
			ServerLoginRetry: new(time.Second), QueryWaitTimeout: new(time.Minute), MaxPinnedConnections: 4},
		Tables: []ttl.Rule{
			{Schema: "public", Table: "sessions", Kind: ttl.KindColumn, Column: "expires_at",
				ColumnType: ttl.TypeTimestamptz, DefaultTTL: 24 * time.Hour, RefreshOnUpdate: true, CreateIndex: true},
			{Schema: "App", Table: "Events", Kind: ttl.KindColumn, Column: "expiry",
				ColumnType: ttl.TypeUnixMilliseconds},
			{Schema: "public", Table: "audit", Kind: ttl.KindDerived, BaseColumn: "created_at",
				ExpireAfter: 90 * 24 * time.Hour},
			{Schema: "public", Table: "tokens", Kind: ttl.KindDerived, BaseColumn: "issued_at",
				IntervalColumn: "ttl_seconds", IntervalSeconds: true, DefaultTTL: 36 * time.Hour},
			{Schema: "app", Table: "carts", Kind: ttl.KindSidecar, SidecarSchema: "app",
				SidecarTable: "carts_ttl", KeyColumns: []string{"tenant_id", "CartID"}, DefaultTTL: 30 * time.Minute},
		},
		Sweeper: &Sweeper{
			DSN:                   "postgres://ttl_sweeper@127.0.0.1:5432/app",
			Interval:              2 * time.Minute,
			BatchSize:             500,
			BatchPause:            new(time.Duration),
			BatchTimeout:          10 * time.Second,
			TargetBatchDuration:   new(20 * time.Millisecond),
			MaxBatchSize:          5000,
			Workers:               4,
			MinRowsPerSecond:      2000,
			DropExpiredPartitions: true,
			CDCOrigin:             "ttlproxy_sweeper",
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
		for i := range min(len(got.Tables), len(want.Tables)) {
			if !reflect.DeepEqual(got.Tables[i], want.Tables[i]) {
				t.Errorf("tables[%d]:\n got %+v\nwant %+v", i, got.Tables[i], want.Tables[i])
			}
		}
	}
}

func TestParseDefaults(t *testing.T) {
	got, err := Parse([]byte("upstream: localhost:5432\nsweeper: {dsn: 'postgres://x@y/z'}\ntables:\n  - table: s\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Keys config does not own stay zero (nil for batch_pause): the proxy,
	// rewrite and sweeper packages apply their own defaults.
	want := &Config{
		Listen:      DefaultListen,
		Upstream:    "localhost:5432",
		AdminListen: DefaultAdminListen,
		PoolMode:    PoolModeSession,
		Tables: []ttl.Rule{{Schema: "public", Table: "s", Kind: ttl.KindColumn,
			Column: "expires_at", ColumnType: ttl.TypeTimestamptz}},
		Sweeper: &Sweeper{DSN: "postgres://x@y/z"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
}

// TestParseUpstreamTCP: keepalives false turns keepalive off, and a
// tcp_user_timeout of 0s is kept apart from an absent one (the proxy's
// default).
// TestParseColumns: tables[].columns[] becomes Rule.Columns, names folded,
// kinds from the keys given, defaults applied.
func TestParseColumns(t *testing.T) {
	const doc = `
upstream: h:1
tables:
  - table: orders
    rule: derived
    base_column: created_at
    expire_after: 7d
    columns:
      - column: Client_IP
        expires_at_column: client_ip_expires_at
        default_ttl: 30d
        refresh_on_update: true
      - column: '"Note"'
        base_column: created_at
        expire_after: 365d
      - column: card_token
        expires_at_column: card_exp
        column_type: unix_s
`
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []ttl.ColumnRule{
		{Column: "client_ip", ExpiresAtColumn: "client_ip_expires_at", ColumnType: ttl.TypeTimestamptz, DefaultTTL: 30 * 24 * time.Hour, RefreshOnUpdate: true},
		{Column: "Note", BaseColumn: "created_at", ExpireAfter: 365 * 24 * time.Hour},
		{Column: "card_token", ExpiresAtColumn: "card_exp", ColumnType: ttl.TypeUnixSeconds},
	}
	if len(got.Tables) != 1 || !reflect.DeepEqual(got.Tables[0].Columns, want) {
		t.Fatalf("Columns:\n got %+v\nwant %+v", got.Tables, want)
	}
	if k := got.Tables[0].Columns[1].Kind(); k != ttl.KindDerived {
		t.Errorf("kind of a base_column entry = %s, want derived", k)
	}
	if _, err := rewrite.New(got.Tables, rewrite.Options{}); err != nil {
		t.Errorf("the rewriter refuses the parsed rules: %v", err)
	}
}

// TestParseColumnsOnly: rule none gives a rule with no row rule and the
// expiring columns only, which the rewriter accepts.
func TestParseColumnsOnly(t *testing.T) {
	const doc = `
upstream: h:1
tables:
  - table: app.customers
    rule: none
    columns:
      - column: phone
        expires_at_column: phone_expires_at
        default_ttl: 90d
      - column: note
        base_column: created_at
        expire_after: 365d
`
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []ttl.Rule{{Schema: "app", Table: "customers", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{
		{Column: "phone", ExpiresAtColumn: "phone_expires_at", ColumnType: ttl.TypeTimestamptz, DefaultTTL: 90 * 24 * time.Hour},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: 365 * 24 * time.Hour},
	}}}
	if !reflect.DeepEqual(got.Tables, want) {
		t.Fatalf("Tables:\n got %+v\nwant %+v", got.Tables, want)
	}
	if got.Tables[0].HasRowRule() {
		t.Error("HasRowRule = true for rule none")
	}
	if _, err := rewrite.New(got.Tables, rewrite.Options{}); err != nil {
		t.Errorf("the rewriter refuses the parsed rules: %v", err)
	}
}

func TestParseUpstreamTCP(t *testing.T) {
	got, err := Parse([]byte("upstream: h:1\nupstream_tcp: {keepalives: false, tcp_user_timeout: 0s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := UpstreamTCP{KeepalivesDisabled: true, TCPUserTimeout: new(time.Duration(0))}
	if !reflect.DeepEqual(got.UpstreamTCP, want) {
		t.Errorf("got %+v, want %+v", got.UpstreamTCP, want)
	}
}

func TestParseNoTablesNoSweeper(t *testing.T) {
	for _, doc := range []string{"upstream: h:1", "upstream: h:1\ntables: []", "upstream: h:1\ntables:"} {
		got, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if len(got.Tables) != 0 || got.Sweeper != nil || got.TLS != nil {
			t.Errorf("%q: got %+v", doc, got)
		}
	}
}

// TestDDLEventsLogin: ddl_events_dsn, else the sweeper's DSN, else none.
func TestDDLEventsLogin(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"upstream: h:1\n", ""},
		{"upstream: h:1\nsweeper: {dsn: 'postgres://s@h/db'}\n", "postgres://s@h/db"},
		{"upstream: h:1\nddl_events_dsn: 'postgres://c@h/db'\nsweeper: {dsn: 'postgres://s@h/db'}\n", "postgres://c@h/db"},
	} {
		cfg, err := Parse([]byte(c.text))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.DDLEventsLogin(); got != c.want {
			t.Errorf("%q: DDLEventsLogin() = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	const up = "upstream: db:5432\n"
	tbl := func(body string) string { return up + "tables:\n  - table: t\n" + body }
	tests := []struct {
		name, doc, want string
	}{
		// Document shape.
		{"empty", "", "upstream: required (the file is empty)"},
		{"only comment", "# nothing\n", "upstream: required (the file is empty)"},
		{"not a mapping", "- a\n- b\n", `configuration: expected a mapping, got a list`},
		{"syntax", "upstream: [\n", "yaml: line 1: did not find expected node content"},
		{"two documents", up + "---\nlisten: :1\n", "line 2: only one YAML document is allowed"},
		{"unknown top key", up + "listn: :1\n", "listn: unknown key (line 2)"},
		{"repeated key", up + "upstream: other:1\n", "upstream: key given twice (line 2)"},

		// Addresses.
		{"missing upstream", "listen: :6432\n", "upstream: required"},
		{"upstream empty", "upstream: ''\n", "upstream: must not be empty"},
		{"upstream null", "upstream:\n", "upstream: expected a value, got nothing"},
		{"upstream no port", "upstream: db\n", `upstream: invalid address "db": want host:port`},
		{"upstream no host", "upstream: :5432\n", `upstream: invalid address ":5432": host is empty`},
		{"upstream bad port", "upstream: db:http\n", `upstream: invalid address "db:http": bad port "http"`},
		{"upstream port zero", "upstream: db:0\n", `upstream: invalid address "db:0": bad port "0"`},
		{"upstream list", "upstream: [a]\n", `upstream: expected a value, got a list`},
		{"listen bad", up + "listen: 6432\n", `listen: invalid address "6432": want host:port`},
		{"admin bad port", up + "admin_listen: localhost:99999\n", `admin_listen: invalid address "localhost:99999": bad port "99999"`},

		// admin, tls, bypass_roles, limits, timeouts.
		{"admin unknown", up + "admin: {web_config: w.yml}\n", "admin.web_config: unknown key (line 2)"},
		{"admin lifecycle not bool", up + "admin: {enable_lifecycle: sometimes}\n", `admin.enable_lifecycle: expected true or false, got "sometimes"`},
		{"admin empty token file", up + "admin: {bearer_token_file: ''}\n", "admin.bearer_token_file: must not be empty"},
		{"tls not mapping", up + "tls: yes\n", `tls: expected a mapping, got "yes"`},
		{"tls missing key", up + "tls: {cert_file: c}\n", "tls.key_file: required"},
		{"tls unknown", up + "tls: {cert_file: c, key_file: k, ca_file: x}\n", "tls.ca_file: unknown key (line 2)"},
		{"bypass not list", up + "bypass_roles: admin\n", `bypass_roles: expected a list, got "admin"`},
		{"bypass empty item", up + "bypass_roles: [a, '']\n", "bypass_roles[1]: must not be empty"},
		{"upstream tls mode", up + "upstream_tls: {sslmode: allow}\n", `upstream_tls.sslmode: "allow" is not one of disable, prefer, require, verify-ca, verify-full`},
		{"keepalive fraction", up + "upstream_tcp: {keepalives_idle: 1500ms}\n", `upstream_tcp.keepalives_idle: must be whole seconds, got "1500ms"`},
		{"keepalive zero", up + "upstream_tcp: {keepalives_interval: 0s}\n", `upstream_tcp.keepalives_interval: must be positive, got "0s"`},
		{"keepalive count", up + "upstream_tcp: {keepalives_count: 0}\n", "upstream_tcp.keepalives_count: must be positive, got 0"},
		{"user timeout fraction", up + "upstream_tcp: {tcp_user_timeout: 1500us}\n", `upstream_tcp.tcp_user_timeout: must be 0s (none) or whole milliseconds, got "1500us"`},
		{"upstream tcp unknown", up + "upstream_tcp: {tcp_keepidle: 10s}\n", "upstream_tcp.tcp_keepidle: unknown key (line 2)"},
		{"upstream tls cert without key", up + "upstream_tls: {sslcert: c.pem}\n", "upstream_tls: sslcert and sslkey go together"},
		{"trusted function not list", up + "trusted_functions: f\n", `trusted_functions: expected a list, got "f"`},
		{"trusted function bad name", up + "trusted_functions: [a.b.c]\n", "trusted_functions[0]: too many dotted parts: want schema.table"},
		{"limits unknown", up + "limits: {max_rows: 1}\n", "limits.max_rows: unknown key (line 2)"},
		{"limits not int", up + "limits: {max_nesting_depth: deep}\n", `limits.max_nesting_depth: expected an integer, got "deep"`},
		{"limits float", up + "limits: {max_statement_bytes: 1.5}\n", `limits.max_statement_bytes: expected an integer, got "1.5"`},
		{"limits zero", up + "limits: {max_statement_bytes: 0}\n", "limits.max_statement_bytes: must be positive, got 0"},
		{"dial timeout zero", up + "dial_timeout: 0s\n", `dial_timeout: must be positive, got "0s"`},
		{"shutdown timeout bad", up + "shutdown_timeout: soon\n", `shutdown_timeout: invalid duration "soon"`},
		{"shutdown timeout zero", up + "shutdown_timeout: 0\n", `shutdown_timeout: must be positive, got "0"`},
		{"catalog ttl bad", up + "catalog_ttl: often\n", `catalog_ttl: invalid duration "often"`},
		{"gomaxprocs zero", up + "gomaxprocs: 0\n", "gomaxprocs: must be positive, got 0"},
		{"gomaxprocs not int", up + "gomaxprocs: all\n", `gomaxprocs: expected an integer, got "all"`},
		{"ddl events dsn empty", up + "ddl_events_dsn: ''\n", "ddl_events_dsn: must not be empty"},
		{"row security unknown", up + "row_security: on\n", `row_security: "on" is not one of off, required`},
		{"row security required without DDL events", up + "row_security: required\n", "row_security: required needs DDL events, so that a policy dropped outside the proxy is seen at once: set ddl_events_dsn (or a sweeper dsn) and run ttlproxy install --ddl-events"},

		// tables: shape and names.
		{"tables not list", up + "tables: {table: t}\n", "tables: expected a list, got a mapping"},
		{"table entry scalar", up + "tables: [t]\n", `tables[0]: expected a mapping, got "t"`},
		{"table missing", up + "tables:\n  - column: x\n", "tables[0].table: required"},
		{"table unknown key", tbl("    colum: x\n"), "tables[0].colum: unknown key (line 4)"},
		{"table three parts", up + "tables: [{table: db.public.t}]\n", `tables[0].table: invalid table name "db.public.t": too many dotted parts: want schema.table`},
		{"table bad char", up + "tables: [{table: 'my-table'}]\n", `tables[0].table: invalid table name "my-table": unexpected "-table" after identifier`},
		{"table starts with digit", up + "tables: [{table: 1t}]\n", `tables[0].table: invalid table name "1t": invalid character '1' in name`},
		{"table unterminated quote", up + "tables: [{table: '\"T'}]\n", `tables[0].table: invalid table name "\"T": unterminated quoted name`},
		{"table empty quote", up + "tables: [{table: 'public.\"\"'}]\n", `tables[0].table: invalid table name "public.\"\"": empty quoted name`},
		{"table trailing dot", up + "tables: [{table: 'public.'}]\n", `tables[0].table: invalid table name "public.": empty name`},
		{"table too long", up + "tables: [{table: " + strings.Repeat("x", 64) + "}]\n", `tables[0].table: invalid table name "` + strings.Repeat("x", 64) + `": name longer than 63 bytes`},
		{"duplicate table", up + "tables:\n  - table: sessions\n  - table: other\n  - table: PUBLIC.Sessions\n", "tables[2].table: public.sessions is already configured in tables[0]"},
		{"quoted names differ", up + "tables:\n  - table: s\n  - table: '\"S\"'\n", ""},
		{"unknown rule", tbl("    rule: hard\n"), `tables[0].rule: unknown rule "hard" (want column, derived, sidecar or none)`},

		// Common keys.
		{"default ttl bad", up + "tables:\n  - table: a\n  - table: b\n    default_ttl: 3x\n", `tables[1].default_ttl: invalid duration "3x"`},
		{"default ttl negative", tbl("    default_ttl: -1h\n"), `tables[0].default_ttl: invalid duration "-1h"`},
		{"default ttl zero", tbl("    default_ttl: 0s\n"), `tables[0].default_ttl: must be positive, got "0s"`},
		{"default ttl number", tbl("    default_ttl: 24\n"), `tables[0].default_ttl: invalid duration "24"`},
		{"refresh not bool", tbl("    default_ttl: 1h\n    refresh_on_update: sometimes\n"), `tables[0].refresh_on_update: expected true or false, got "sometimes"`},
		{"refresh without ttl", tbl("    refresh_on_update: true\n"), "tables[0].refresh_on_update: needs default_ttl (the new expiry is now() + default_ttl)"},

		// column rule.
		{"column type unknown", tbl("    column_type: bigint\n"), `tables[0].column_type: unknown column type "bigint" (want one of timestamptz, timestamp, date, unix_s, unix_ms, unix_us, unix_ns)`},
		{"column bad name", tbl("    column: 'a b'\n"), `tables[0].column: invalid column name "a b": unexpected " b" after identifier`},
		{"column with base_column", tbl("    base_column: c\n"), "tables[0].base_column: not allowed with rule column (it belongs to rule derived)"},
		{"column with sidecar", tbl("    sidecar_table: x\n"), "tables[0].sidecar_table: not allowed with rule column (it belongs to rule sidecar)"},

		// derived rule.
		{"derived no base", tbl("    rule: derived\n    expire_after: 1h\n"), "tables[0].base_column: required with rule derived"},
		{"derived neither", tbl("    rule: derived\n    base_column: c\n"), "tables[0].expire_after: required with rule derived (or interval_column)"},
		{"derived both", tbl("    rule: derived\n    base_column: c\n    expire_after: 1h\n    interval_column: i\n"), "tables[0].interval_column: not allowed together with expire_after (give one of them)"},
		{"derived bad after", tbl("    rule: derived\n    base_column: c\n    expire_after: 1y\n"), `tables[0].expire_after: invalid duration "1y"`},
		{"derived unit without column", tbl("    rule: derived\n    base_column: c\n    expire_after: 1h\n    interval_unit: seconds\n"), "tables[0].interval_unit: only allowed with interval_column"},
		{"derived ttl with after", tbl("    rule: derived\n    base_column: c\n    expire_after: 1h\n    default_ttl: 1h\n"), "tables[0].default_ttl: not allowed with expire_after (every row lives exactly expire_after)"},
		{"derived bad unit", tbl("    rule: derived\n    base_column: c\n    interval_column: i\n    interval_unit: minutes\n"), `tables[0].interval_unit: unknown unit "minutes" (want interval or seconds)`},
		{"derived same columns", tbl("    rule: derived\n    base_column: c\n    interval_column: C\n"), "tables[0].interval_column: must differ from base_column"},
		{"derived with column", tbl("    rule: derived\n    base_column: c\n    expire_after: 1h\n    column: e\n"), "tables[0].column: not allowed with rule derived (it belongs to rule column)"},
		{"derived with key_columns", tbl("    rule: derived\n    key_columns: [id]\n"), "tables[0].key_columns: not allowed with rule derived (it belongs to rule sidecar)"},

		// sidecar rule.
		{"sidecar no table", tbl("    rule: sidecar\n    key_columns: [id]\n"), "tables[0].sidecar_table: required with rule sidecar"},
		{"sidecar no keys", tbl("    rule: sidecar\n    sidecar_table: t_ttl\n"), "tables[0].key_columns: required with rule sidecar"},
		{"sidecar empty keys", tbl("    rule: sidecar\n    sidecar_table: t_ttl\n    key_columns: []\n"), "tables[0].key_columns: must name at least one column"},
		{"sidecar dup keys", tbl("    rule: sidecar\n    sidecar_table: t_ttl\n    key_columns: [id, ID]\n"), "tables[0].key_columns[1]: column id is listed twice"},
		{"sidecar bad key", tbl("    rule: sidecar\n    sidecar_table: t_ttl\n    key_columns: ['a.b']\n"), `tables[0].key_columns[0]: invalid column name "a.b": unexpected ".b" after identifier`},
		{"sidecar self", tbl("    rule: sidecar\n    sidecar_table: public.t\n    key_columns: [id]\n"), "tables[0].sidecar_table: must differ from table"},
		{"sidecar is ttl table", up + "tables:\n  - table: t\n    rule: sidecar\n    sidecar_table: u\n    key_columns: [id]\n  - table: u\n", "tables[0].sidecar_table: public.u is itself a TTL table (tables[1])"},
		{"sidecar with column_type", tbl("    rule: sidecar\n    column_type: date\n"), "tables[0].column_type: not allowed with rule sidecar (it belongs to rule column)"},

		// columns.
		{"columns not list", tbl("    columns: {column: c}\n"), "tables[0].columns: expected a list, got a mapping"},
		{"columns empty", tbl("    columns: []\n"), "tables[0].columns: must name at least one column (or leave the key out)"},
		{"columns entry scalar", tbl("    columns: [c]\n"), `tables[0].columns[0]: expected a mapping, got "c"`},
		{"columns unknown key", tbl("    columns:\n      - {column: c, expires_at: e}\n"), "tables[0].columns[0].expires_at: unknown key (line 5)"},
		{"columns no column", tbl("    columns:\n      - {expires_at_column: e}\n"), "tables[0].columns[0].column: required"},
		{"columns bad name", tbl("    columns:\n      - {column: 'a b', expires_at_column: e}\n"), `tables[0].columns[0].column: invalid column name "a b": unexpected " b" after identifier`},
		{"columns no expiry", tbl("    columns:\n      - {column: c}\n"), "tables[0].columns[0].expires_at_column: required (or base_column with expire_after)"},
		{"columns both expiries", tbl("    columns:\n      - {column: c, expires_at_column: e, base_column: b, expire_after: 1h}\n"), "tables[0].columns[0].base_column: not allowed together with expires_at_column (give one of them)"},
		{"columns expiry is column", tbl("    columns:\n      - {column: c, expires_at_column: C}\n"), "tables[0].columns[0].expires_at_column: must differ from column"},
		{"columns base is column", tbl("    columns:\n      - {column: c, base_column: c, expire_after: 1h}\n"), "tables[0].columns[0].base_column: must differ from column"},
		{"columns base without after", tbl("    columns:\n      - {column: c, base_column: b}\n"), "tables[0].columns[0].expire_after: required with base_column"},
		{"columns after without base", tbl("    columns:\n      - {column: c, expires_at_column: e, expire_after: 1h}\n"), "tables[0].columns[0].expire_after: only allowed with base_column"},
		{"columns after zero", tbl("    columns:\n      - {column: c, base_column: b, expire_after: 0s}\n"), `tables[0].columns[0].expire_after: must be positive, got "0s"`},
		{"columns type unknown", tbl("    columns:\n      - {column: c, expires_at_column: e, column_type: bigint}\n"), `tables[0].columns[0].column_type: unknown column type "bigint" (want one of timestamptz, timestamp, date, unix_s, unix_ms, unix_us, unix_ns)`},
		{"columns type with base", tbl("    columns:\n      - {column: c, base_column: b, expire_after: 1h, column_type: date}\n"), "tables[0].columns[0].column_type: only allowed with expires_at_column (a base column's value lives exactly expire_after)"},
		{"columns ttl with base", tbl("    columns:\n      - {column: c, base_column: b, expire_after: 1h, default_ttl: 1h}\n"), "tables[0].columns[0].default_ttl: only allowed with expires_at_column (a base column's value lives exactly expire_after)"},
		{"columns ttl bad", tbl("    columns:\n      - {column: c, expires_at_column: e, default_ttl: soon}\n"), `tables[0].columns[0].default_ttl: invalid duration "soon"`},
		{"columns refresh without ttl", tbl("    columns:\n      - {column: c, expires_at_column: e, refresh_on_update: true}\n"), "tables[0].columns[0].refresh_on_update: needs default_ttl (the new expiry is now() + default_ttl)"},
		{"columns refresh not bool", tbl("    columns:\n      - {column: c, expires_at_column: e, default_ttl: 1h, refresh_on_update: 1}\n"), `tables[0].columns[0].refresh_on_update: expected true or false, got "1"`},
		{"columns listed twice", tbl("    columns:\n      - {column: c, expires_at_column: e}\n      - {column: C, expires_at_column: f}\n"), "tables[0].columns[1].column: c is already listed in tables[0].columns[0]"},
		{"columns row expiry", tbl("    columns:\n      - {column: expires_at, expires_at_column: e}\n"), "tables[0].columns[0].column: expires_at is a column the table's column rule reads"},
		{"columns row base", tbl("    rule: derived\n    base_column: created_at\n    expire_after: 1h\n    columns:\n      - {column: created_at, expires_at_column: e}\n"), "tables[0].columns[0].column: created_at is a column the table's derived rule reads"},
		{"columns sidecar key", tbl("    rule: sidecar\n    sidecar_table: t_ttl\n    key_columns: [id]\n    columns:\n      - {column: id, expires_at_column: e}\n"), "tables[0].columns[0].column: id is a column the table's sidecar rule reads"},
		{"columns expiry expires", tbl("    columns:\n      - {column: c, expires_at_column: e}\n      - {column: e, base_column: b, expire_after: 1h}\n"), "tables[0].columns[1].column: e is the expiry of tables[0].columns[0], which cannot itself expire"},
		{"columns base expires", tbl("    columns:\n      - {column: b, expires_at_column: e}\n      - {column: c, base_column: b, expire_after: 1h}\n"), "tables[0].columns[0].column: b is the expiry of tables[0].columns[1], which cannot itself expire"},
		// rule none.
		{"none without columns", tbl("    rule: none\n"), "tables[0].columns: required with rule none (the table's expiring columns)"},
		{"none with null columns", tbl("    rule: none\n    columns: ~\n"), "tables[0].columns: required with rule none (the table's expiring columns)"},
		{"none with empty columns", tbl("    rule: none\n    columns: []\n"), "tables[0].columns: must name at least one column (or leave the key out)"},
		{"none with column", tbl("    rule: none\n    column: e\n    columns:\n      - {column: c, expires_at_column: e}\n"), "tables[0].column: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with column_type", tbl("    rule: none\n    column_type: date\n"), "tables[0].column_type: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with base_column", tbl("    rule: none\n    base_column: b\n"), "tables[0].base_column: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with expire_after", tbl("    rule: none\n    expire_after: 1h\n"), "tables[0].expire_after: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with interval_column", tbl("    rule: none\n    interval_column: i\n"), "tables[0].interval_column: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with default_ttl", tbl("    rule: none\n    default_ttl: 1h\n"), "tables[0].default_ttl: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with refresh", tbl("    rule: none\n    refresh_on_update: false\n"), "tables[0].refresh_on_update: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with sidecar", tbl("    rule: none\n    sidecar_table: x\n"), "tables[0].sidecar_table: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with key_columns", tbl("    rule: none\n    key_columns: [id]\n"), "tables[0].key_columns: not allowed with rule none (a table with no row rule has no row expiry)"},
		{"none with create_index", tbl("    rule: none\n    create_index: true\n    columns:\n      - {column: c, expires_at_column: e}\n"), ""},
		{"none columns expiry expires", tbl("    rule: none\n    columns:\n      - {column: c, expires_at_column: e}\n      - {column: e, base_column: b, expire_after: 1h}\n"), "tables[0].columns[1].column: e is the expiry of tables[0].columns[0], which cannot itself expire"},
		{"none accepted", tbl("    rule: none\n    columns:\n      - {column: expires_at, expires_at_column: e}\n"), ""},

		// Pooling.
		{"pool mode", up + "pool_mode: statement\n", `pool_mode: "statement" is not one of session, transaction`},
		{"pool mode empty", up + "pool_mode: ''\n", "pool_mode: must not be empty"},
		{"auth type", up + "auth_type: cert\n", `auth_type: "cert" is not one of scram-sha-256, md5, plain, trust`},
		{"auth file empty", up + "auth_file: ''\n", "auth_file: must not be empty"},
		{"auth file and dsn", up + "auth_file: /u.txt\nauth_dsn: host=db\n", "auth_file, auth_dsn: set one of them, not both"},
		{"auth query no dsn", up + "auth_query: SELECT 1\n", "auth_query: needs auth_dsn, the login that runs it"},
		{"transaction no auth", up + "pool_mode: transaction\n", "auth_file: pool_mode transaction needs auth_file or auth_dsn, unless auth_type is trust"},
		{"transaction md5 no auth", up + "pool_mode: transaction\nauth_type: md5\n", "auth_file: pool_mode transaction needs auth_file or auth_dsn, unless auth_type is trust"},
		{"pool size zero", up + "default_pool_size: 0\n", "default_pool_size: must be positive, got 0"},
		{"pool size text", up + "default_pool_size: many\n", `default_pool_size: expected an integer, got "many"`},
		{"min pool size negative", up + "min_pool_size: -1\n", "min_pool_size: must not be negative, got -1"},
		{"reserve negative", up + "reserve_pool_size: -2\n", "reserve_pool_size: must not be negative, got -2"},
		{"max db negative", up + "max_db_connections: -3\n", "max_db_connections: must not be negative, got -3"},
		{"min above size", up + "default_pool_size: 5\nmin_pool_size: 6\n", "min_pool_size: 6 is larger than default_pool_size (5)"},
		{"min above default size", up + "min_pool_size: 21\n", "min_pool_size: 21 is larger than default_pool_size (20)"},
		{"reserve timeout zero", up + "reserve_pool_timeout: 0s\n", `reserve_pool_timeout: must be positive, got "0s"`},
		{"connect timeout bad", up + "server_connect_timeout: 15\n", `server_connect_timeout: invalid duration "15"`},
		{"lifetime zero", up + "server_lifetime: 0s\n", "server_lifetime: must be positive (PgBouncer's 0, one use per server connection, is not supported)"},
		{"idle timeout negative", up + "server_idle_timeout: -1s\n", `server_idle_timeout: invalid duration "-1s"`},
		{"login retry bad", up + "server_login_retry: soon\n", `server_login_retry: invalid duration "soon"`},
		{"wait timeout list", up + "query_wait_timeout: [1s]\n", "query_wait_timeout: expected a value, got a list"},
		{"pinned zero", up + "max_pinned_connections: 0\n", "max_pinned_connections: must be positive, got 0"},

		// Peers.
		{"peer id negative", up + "peer_id: -1\n", "peer_id: must not be negative, got -1"},
		{"peer id large", up + "peer_id: 16384\n", "peer_id: 16384 is larger than 16383"},
		{"peers not list", up + "peers: {id: 1}\n", "peers: expected a list, got a mapping"},
		{"peers no id", up + "peers:\n  - {host: a}\n", "peers[0].id: required"},
		{"peers no host", up + "peers:\n  - {id: 1}\n", "peers[0].host: required"},
		{"peers unknown key", up + "peers:\n  - {id: 1, host: a, addr: b}\n", "peers[0].addr: unknown key (line 3)"},
		{"peers id zero", up + "peers:\n  - {id: 0, host: a}\n", "peers[0].id: must be positive, got 0"},
		{"peers id large", up + "peers:\n  - {id: 16384, host: a}\n", "peers[0].id: 16384 is larger than 16383"},
		{"peers id twice", up + "peers:\n  - {id: 1, host: a}\n  - {id: 1, host: b}\n", "peers[1].id: 1 is peers[0]'s too"},
		{"peers address twice", up + "peers:\n  - {id: 1, host: a}\n  - {id: 2, host: a, port: 6432}\n", "peers[1]: a:6432 is peers[0]'s address too"},
		{"peers port", up + "peers:\n  - {id: 1, host: a, port: 70000}\n", "peers[0].port: 70000 is not a port"},
		{"peers host empty", up + "peers:\n  - {id: 1, host: ''}\n", "peers[0].host: must not be empty"},

		// sweeper.
		{"sweeper no dsn", up + "sweeper: {interval: 1m}\n", "sweeper.dsn: required"},
		{"sweeper not mapping", up + "sweeper: on\n", `sweeper: expected a mapping, got "on"`},
		{"sweeper empty", up + "sweeper:\n", "sweeper: expected a mapping, got nothing"},
		{"sweeper unknown", up + "sweeper: {dsn: x, worker: 2}\n", "sweeper.worker: unknown key (line 2)"},
		{"sweeper workers", up + "sweeper: {dsn: x, workers: 0}\n", "sweeper.workers: must be positive, got 0"},
		{"sweeper drop partitions", up + "sweeper: {dsn: x, drop_expired_partitions: 1}\n", `sweeper.drop_expired_partitions: expected true or false, got "1"`},
		{"sweeper cdc origin empty", up + "sweeper: {dsn: x, cdc_origin: ''}\n", "sweeper.cdc_origin: must not be empty"},
		{"sweeper cdc origin long", up + "sweeper: {dsn: x, cdc_origin: " + strings.Repeat("o", 513) + "}\n", "sweeper.cdc_origin: a replication origin name is at most 512 bytes, got 513"},
		{"sweeper interval", up + "sweeper: {dsn: x, interval: 0s}\n", `sweeper.interval: must be positive, got "0s"`},
		{"sweeper batch size", up + "sweeper: {dsn: x, batch_size: -5}\n", "sweeper.batch_size: must be positive, got -5"},
		{"sweeper batch pause", up + "sweeper: {dsn: x, batch_pause: 50}\n", `sweeper.batch_pause: invalid duration "50"`},
		{"sweeper batch timeout", up + "sweeper: {dsn: x, batch_timeout: 0s}\n", `sweeper.batch_timeout: must be positive, got "0s"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("error = %q\n want   %q", got, tt.want)
			}
		})
	}
}

// TestParsePooling: pool_mode transaction with trust needs no auth source;
// the pooling keys are accepted in session mode too, where PoolingKeysSet
// lists them so that the caller can say they do nothing there.
func TestParsePooling(t *testing.T) {
	got, err := Parse([]byte("upstream: db:5432\npool_mode: transaction\nauth_type: trust\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.PoolMode != PoolModeTransaction || got.Auth != (Auth{Type: "trust"}) {
		t.Errorf("PoolMode %q, Auth %+v", got.PoolMode, got.Auth)
	}
	got, err = Parse([]byte("upstream: db:5432\nauth_file: /etc/ttl/userlist.txt\nmin_pool_size: 0\nserver_idle_timeout: 0s\nquery_wait_timeout: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.PoolMode != PoolModeSession {
		t.Errorf("PoolMode = %q, want session", got.PoolMode)
	}
	// min_pool_size: 0 is its default: nothing to say about it.
	if keys, want := got.PoolingKeysSet(), []string{"auth_file", "server_idle_timeout", "query_wait_timeout"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("PoolingKeysSet() = %v, want %v", keys, want)
	}
	got, err = Parse([]byte("upstream: db:5432\n"))
	if err != nil {
		t.Fatal(err)
	}
	if keys := got.PoolingKeysSet(); keys != nil {
		t.Errorf("PoolingKeysSet() = %v, want none", keys)
	}
}

// TestParsePeers: peer_id and peers, the port defaulting to 6432; an
// entry may be the instance itself, and peers may come without peer_id
// (serve --peer-id gives it).
func TestParsePeers(t *testing.T) {
	got, err := Parse([]byte("upstream: db:5432\npeer_id: 2\npeers:\n  - {id: 1, host: ttlproxy-0.ttlproxy}\n  - {id: 2, host: ttlproxy-1.ttlproxy, port: 7432}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Peer{{ID: 1, Host: "ttlproxy-0.ttlproxy", Port: 6432}, {ID: 2, Host: "ttlproxy-1.ttlproxy", Port: 7432}}
	if got.PeerID != 2 || !reflect.DeepEqual(got.Peers, want) {
		t.Errorf("peer_id %d, peers %+v; want 2, %+v", got.PeerID, got.Peers, want)
	}
	if a := got.Peers[1].Addr(); a != "ttlproxy-1.ttlproxy:7432" {
		t.Errorf("Addr() = %q", a)
	}
	if keys, want := got.PoolingKeysSet(), []string{"peer_id", "peers"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("PoolingKeysSet() = %v, want %v", keys, want)
	}
	got, err = Parse([]byte("upstream: db:5432\npeers:\n  - {id: 1, host: '::1'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.PeerID != 0 || got.Peers[0].Addr() != "[::1]:6432" {
		t.Errorf("peer_id %d, peers %+v", got.PeerID, got.Peers)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("upstream: db:5432\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("upstream: db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if want := bad + `: upstream: invalid address "db": want host:port`; err == nil || err.Error() != want {
		t.Errorf("Load(bad) = %v, want %s", err, want)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !os.IsNotExist(err) {
		t.Errorf("Load(missing) = %v, want not-exist", err)
	}
}

func TestExampleFile(t *testing.T) {
	cfg, err := Load("../ttlproxy.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Tables) == 0 || cfg.Sweeper == nil {
		t.Errorf("example should show tables and a sweeper: %+v", cfg)
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "90s", want: 90 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "90d", want: 90 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "12h1d", want: 36 * time.Hour},
		{in: "1.5d", want: 36 * time.Hour},
		{in: "2d30m15s", want: 48*time.Hour + 30*time.Minute + 15*time.Second},
		{in: "0d", want: 0},
		{in: "0", want: 0},
		{in: "", bad: true},
		{in: "d", bad: true},
		{in: "3x", bad: true},
		{in: "1dd", bad: true},
		{in: "1d3", bad: true},
		{in: "-1d", bad: true},
		{in: "-5s", bad: true},
		{in: "1..5d", bad: true},
		{in: "200000d", bad: true},
		{in: "106751d23h", want: 2562047 * time.Hour},
		{in: "106751d24h", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("ParseDuration(%q) = %v, want error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseQualified(t *testing.T) {
	tests := []struct{ in, schema, table string }{
		{"sessions", "public", "sessions"},
		{"Sessions", "public", "sessions"},
		{"App.Sessions", "app", "sessions"},
		{`"App"."Sessions"`, "App", "Sessions"},
		{`"a.b".c`, "a.b", "c"},
		{`"say ""hi"""`, "public", `say "hi"`},
		{"t$1", "public", "t$1"},
		{"_x", "public", "_x"},
		{"ÜBER", "public", "Über"}, // only ASCII is folded, as the server does in UTF-8
	}
	for _, tt := range tests {
		s, tb, err := parseQualified(tt.in, "public")
		if err != nil || s != tt.schema || tb != tt.table {
			t.Errorf("parseQualified(%q) = %q, %q, %v; want %q, %q", tt.in, s, tb, err, tt.schema, tt.table)
		}
	}
}

// FuzzParse checks that no document makes Parse panic and that every accepted
// document yields rules the rewriter accepts.
func FuzzParse(f *testing.F) {
	f.Add([]byte("upstream: db:5432\ntables:\n  - table: s\n    default_ttl: 1d\n"))
	f.Add([]byte("upstream: db:5432\ntables:\n  - {table: '\"A\".b', rule: derived, base_column: c, interval_column: i}\n"))
	f.Add([]byte("upstream: &a db:1\nlisten: *a\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		if _, err := rewrite.New(cfg.Tables, rewrite.Options{MaxStatementBytes: cfg.Limits.MaxStatementBytes, MaxNestingDepth: cfg.Limits.MaxNestingDepth}); err != nil {
			t.Fatalf("accepted config rejected by rewrite.New: %v", err)
		}
	})
}
