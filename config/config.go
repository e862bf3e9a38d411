// Package config reads and validates the ttlproxy configuration file.
//
// The file is YAML. Unknown keys, repeated keys, wrong value types and keys
// that do not belong to a table's rule kind are errors, and every error names
// the key path, e.g. `tables[1].default_ttl: invalid duration "3x"`.
//
//	cfg, err := config.Load("ttlproxy.yaml")
//	if err != nil {
//		return err // e.g. "ttlproxy.yaml: upstream: required"
//	}
//	rw, err := rewrite.New(cfg.Tables, rewrite.Options{MaxStatementBytes: cfg.Limits.MaxStatementBytes})
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Defaults of the keys config owns. Every other key the file leaves out stays
// zero (nil for batch_pause, where 0 is a value): the package that uses it
// applies its own default (proxy.Default*, rewrite.Default*, sweeper.Default*).
const (
	DefaultListen      = "127.0.0.1:6432"
	DefaultAdminListen = "127.0.0.1:9187"
)

// Row security levels (row_security).
const (
	RowSecurityOff      = "off"
	RowSecurityRequired = "required"
)

// Config is a validated configuration. Listen and AdminListen hold their
// final values; a tuning key the file leaves out is zero, which the package
// that owns it reads as its default.
type Config struct {
	// Listen is the client-facing host:port.
	Listen string
	// ListenReusePort sets SO_REUSEPORT on the client listener, so that a
	// new instance can listen on the same port while the old one drains (a
	// rolling restart).
	ListenReusePort bool
	// Upstream is the database server's host:port.
	Upstream string
	// AdminListen is the HTTP host:port for /metrics, /healthz, /readyz,
	// /status and POST /-/reload.
	AdminListen string
	// Admin guards the admin HTTP server.
	Admin Admin
	// TLS enables client-facing TLS; nil means clients are told TLS is not
	// available.
	TLS *TLS
	// UpstreamTLS configures TLS to the upstream server; nil means sslmode
	// prefer.
	UpstreamTLS *UpstreamTLS
	// UpstreamTCP sets TCP keepalive and TCP_USER_TIMEOUT on the sockets
	// to the upstream server.
	UpstreamTCP UpstreamTCP
	// BypassRoles are login roles whose sessions are neither filtered nor
	// stamped, compared exactly as the client sends the user name.
	BypassRoles []string
	// TrustedFunctions are the functions a statement may call although
	// their bodies read a TTL table inside the server, where they see
	// expired rows: "schema.name", or a bare name for every function so
	// named, folded as PostgreSQL would.
	TrustedFunctions []string
	// Limits bound what one client can send.
	Limits Limits
	// DialTimeout bounds connecting to the upstream server; 0:
	// proxy.DefaultDialTimeout.
	DialTimeout time.Duration
	// ClientLoginTimeout bounds a client's startup and authentication; 0:
	// proxy.DefaultClientLoginTimeout.
	ClientLoginTimeout time.Duration
	// IdleSessionTimeout closes clients idle outside a transaction block
	// for longer (SQLSTATE 57P05); 0: never.
	IdleSessionTimeout time.Duration
	// IdleTransactionTimeout closes clients idle inside a transaction
	// block for longer (SQLSTATE 25P03; PgBouncer's
	// idle_transaction_timeout); 0: never.
	IdleTransactionTimeout time.Duration
	// CatalogTTL bounds how old a session's catalog snapshot (the TTL
	// tables' columns and keys, the views and functions that read them)
	// gets before it is read again; 0: proxy.DefaultCatalogTTL.
	CatalogTTL time.Duration
	// GOMAXPROCS is how many OS threads run the process's Go code at once
	// (runtime.GOMAXPROCS); 0: the GOMAXPROCS environment variable when it
	// is set, else 1 (cmd/ttlproxy's DefaultGOMAXPROCS).
	GOMAXPROCS int
	// DDLEventsDSN is the connection string of the login the proxy
	// listens for DDL events with and reads the catalog with after them
	// (proxy.Config.DDLEventsDSN); "": the sweeper's DSN (DDLEventsLogin).
	// It may hold a password, so it is never logged.
	DDLEventsDSN string
	// ShutdownTimeout bounds how long in-flight statements may run after a
	// shutdown signal before their connections are closed; 0:
	// proxy.DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// RowSecurity is row_security: RowSecurityOff (the default, "": off)
	// or RowSecurityRequired, under which the proxy serves a TTL table only
	// while the server holds its live condition as the row-level security
	// policy of ttlproxy install --row-security
	// (rewrite.Options.RequireRowSecurity). Required needs DDL events
	// (DDLEventsLogin), so that a policy dropped outside the proxy is seen
	// at once.
	RowSecurity string
	// PoolMode is pool_mode: PoolModeSession (the default) or
	// PoolModeTransaction (proxy.Config.PoolMode).
	PoolMode string
	// Auth authenticates clients in pool_mode transaction; session mode
	// ignores it.
	Auth Auth
	// Pool bounds the pools of pool_mode transaction; session mode
	// ignores it.
	Pool Pool
	// PeerID is peer_id, the instance's id among Peers (1 to MaxPeerID),
	// carried in the cancel keys it gives clients in pool_mode
	// transaction; 0: not peered. `serve --peer-id` overrides it.
	PeerID int
	// Peers are the instances of the deployment, the same list in every
	// one (proxy.Config.Peers); session mode ignores them and PeerID.
	Peers []Peer
	// Tables are the TTL tables, names already folded as PostgreSQL would.
	Tables []ttl.Rule
	// Sweeper configures the background deletion of expired rows; nil means
	// no sweeper runs.
	Sweeper *Sweeper
}

// UpstreamTLS configures TLS to the upstream server with libpq's names.
type UpstreamTLS struct {
	// SSLMode is disable, prefer (the default), require, verify-ca or
	// verify-full.
	SSLMode string
	// SSLRootCert is a PEM file of root certificates for verify-ca and
	// verify-full; "" means the system's.
	SSLRootCert string
	// SSLCert and SSLKey are an optional client certificate and key (PEM).
	SSLCert, SSLKey string
}

// UpstreamTCP sets TCP keepalive and TCP_USER_TIMEOUT on the sockets to the
// upstream server, with libpq's names.
type UpstreamTCP struct {
	// KeepalivesDisabled turns TCP keepalive off (keepalives: false).
	KeepalivesDisabled bool
	// KeepalivesIdle, KeepalivesInterval and KeepalivesCount are
	// TCP_KEEPIDLE, TCP_KEEPINTVL and TCP_KEEPCNT (whole seconds for the
	// durations); 0: proxy.DefaultKeepalivesIdle and the others.
	KeepalivesIdle, KeepalivesInterval time.Duration
	KeepalivesCount                    int
	// TCPUserTimeout is TCP_USER_TIMEOUT; nil: proxy.DefaultTCPUserTimeout;
	// 0: none (the system's behaviour).
	TCPUserTimeout *time.Duration
}

// Admin guards the admin HTTP server. /metrics, /healthz and /readyz are
// open (the Prometheus convention); /status (users, databases, client
// addresses) and POST /-/reload answer 403 unless enabled here or the
// request carries the bearer token.
type Admin struct {
	// WebConfigFile is a web configuration file of Prometheus's
	// exporter-toolkit (the format of --web.config.file: TLS, basic auth,
	// rate limit) for every admin endpoint; "" serves plain HTTP without
	// authentication. It is read again on every request.
	WebConfigFile string
	// EnableStatus serves GET /status.
	EnableStatus bool
	// EnableLifecycle serves POST /-/reload (Prometheus's
	// --web.enable-lifecycle).
	EnableLifecycle bool
	// BearerTokenFile holds a token (surrounding white space ignored) that
	// opens /status and POST /-/reload to a request carrying
	// "Authorization: Bearer TOKEN" when they are not enabled.
	BearerTokenFile string
}

// TLS names the certificate and key files (PEM) presented to clients.
type TLS struct {
	CertFile string
	KeyFile  string
}

// Limits bound statement and message sizes.
type Limits struct {
	// MaxStatementBytes rejects longer statements on TTL tables before
	// parsing; 0: rewrite.DefaultMaxStatementBytes.
	MaxStatementBytes int
	// MaxNestingDepth rejects more deeply nested statements before parsing:
	// the parser can exhaust its stack on extreme nesting; 0:
	// rewrite.DefaultMaxNestingDepth.
	MaxNestingDepth int
	// MaxMessageBytes is the largest protocol message accepted from a
	// client; 0: proxy.DefaultMaxMessageBytes. The proxy refuses to start
	// when it is smaller than MaxStatementBytes.
	MaxMessageBytes int
	// MaxClientConnections caps the client connections open at once
	// (SQLSTATE 53300 beyond); 0: no limit.
	MaxClientConnections int
}

// Sweeper configures the sweeper.
type Sweeper struct {
	// DSN is the sweeper's own connection string; it may hold a password, so
	// it is never logged.
	DSN string
	// Interval is the pause between sweep runs; 0: sweeper.DefaultInterval.
	Interval time.Duration
	// BatchSize is the number of rows deleted per statement; 0:
	// sweeper.DefaultBatchSize.
	BatchSize int
	// BatchPause is the pause between two batches (0 is none); nil:
	// sweeper.DefaultBatchPause.
	BatchPause *time.Duration
	// BatchTimeout bounds one batch; 0: sweeper.DefaultBatchTimeout.
	BatchTimeout time.Duration
	// TargetBatchDuration is the transaction time batch sizes adapt to (0s:
	// fixed batch_size); nil: sweeper.DefaultTargetBatchDuration.
	TargetBatchDuration *time.Duration
	// MaxBatchSize bounds adapted batches; 0: sweeper.DefaultMaxBatchSize.
	MaxBatchSize int
	// Workers is the number of slices of a table swept at once; 0:
	// sweeper.DefaultWorkers.
	Workers int
	// MinRowsPerSecond is the least rate the pacing backs off to per table
	// (sweeper.Config.MinRowsPerSecond); 0: none.
	MinRowsPerSecond int
	// DropExpiredPartitions detaches and drops the expired partitions of
	// tables range-partitioned on their expiry column.
	DropExpiredPartitions bool
	// CDCOrigin is the replication origin the sweeper's deletes carry, so
	// that change-data-capture consumers can filter them; "" is none.
	CDCOrigin string
}

// Load reads and validates the file at path. Errors are prefixed with path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path) //nolint:gosec // reading the file the operator names is the point
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse validates a configuration document.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("upstream: required (the file is empty)")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: only one YAML document is allowed", extra.Line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, errors.New("upstream: required (the file is empty)")
		}
		root = root.Content[0]
	}
	if isNull(resolve(root)) {
		return nil, errors.New("upstream: required (the file is empty)")
	}
	return parseRoot(root)
}

func parseRoot(root *yaml.Node) (*Config, error) {
	f, err := mapping(root, "",
		"listen", "listen_reuseport", "upstream", "admin_listen", "admin", "tls", "upstream_tls", "upstream_tcp", "bypass_roles", "trusted_functions", "limits",
		"dial_timeout", "shutdown_timeout", "client_login_timeout", "idle_session_timeout", "idle_transaction_timeout", "catalog_ttl", "gomaxprocs", "ddl_events_dsn", "row_security", "tables", "sweeper",
		"pool_mode", "auth_type", "auth_file", "auth_query", "auth_dsn",
		"default_pool_size", "min_pool_size", "reserve_pool_size", "reserve_pool_timeout", "max_db_connections",
		"server_lifetime", "server_idle_timeout", "server_connect_timeout", "server_login_retry", "query_wait_timeout",
		"max_pinned_connections", "peer_id", "peers")
	if err != nil {
		return nil, err
	}
	cfg := &Config{
		Listen:      DefaultListen,
		AdminListen: DefaultAdminListen,
	}

	if !f.has("upstream") {
		return nil, errors.New("upstream: required")
	}
	if cfg.Upstream, err = address(f["upstream"], true); err != nil {
		return nil, err
	}
	if v, ok := f["listen"]; ok {
		if cfg.Listen, err = address(v, false); err != nil {
			return nil, err
		}
	}
	if v, ok := f["listen_reuseport"]; ok {
		if cfg.ListenReusePort, err = v.boolean(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["admin_listen"]; ok {
		if cfg.AdminListen, err = address(v, false); err != nil {
			return nil, err
		}
	}
	if v, ok := f["admin"]; ok {
		if err := parseAdmin(v, &cfg.Admin); err != nil {
			return nil, err
		}
	}
	if v, ok := f["tls"]; ok {
		if cfg.TLS, err = parseTLS(v); err != nil {
			return nil, err
		}
	}
	if v, ok := f["upstream_tls"]; ok {
		if cfg.UpstreamTLS, err = parseUpstreamTLS(v); err != nil {
			return nil, err
		}
	}
	if v, ok := f["upstream_tcp"]; ok {
		if err := parseUpstreamTCP(v, &cfg.UpstreamTCP); err != nil {
			return nil, err
		}
	}
	if v, ok := f["bypass_roles"]; ok {
		if cfg.BypassRoles, err = v.strings(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["trusted_functions"]; ok {
		if cfg.TrustedFunctions, err = parseFunctionNames(v); err != nil {
			return nil, err
		}
	}
	if v, ok := f["limits"]; ok {
		if err := parseLimits(v, &cfg.Limits); err != nil {
			return nil, err
		}
	}
	if v, ok := f["dial_timeout"]; ok {
		if cfg.DialTimeout, err = v.positiveDuration(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["shutdown_timeout"]; ok {
		if cfg.ShutdownTimeout, err = v.positiveDuration(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["client_login_timeout"]; ok {
		if cfg.ClientLoginTimeout, err = v.positiveDuration(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["idle_session_timeout"]; ok {
		if cfg.IdleSessionTimeout, err = v.positiveDuration(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["idle_transaction_timeout"]; ok {
		if cfg.IdleTransactionTimeout, err = v.positiveDuration(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["catalog_ttl"]; ok {
		if cfg.CatalogTTL, err = v.positiveDuration(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["gomaxprocs"]; ok {
		if cfg.GOMAXPROCS, err = v.positiveInt(); err != nil {
			return nil, err
		}
	}
	if v, ok := f["ddl_events_dsn"]; ok {
		if cfg.DDLEventsDSN, err = v.str(); err != nil {
			return nil, err
		}
	}
	if err := parsePooling(f, cfg); err != nil {
		return nil, err
	}
	if err := parsePeers(f, cfg); err != nil {
		return nil, err
	}
	if v, ok := f["tables"]; ok {
		if cfg.Tables, err = parseTables(v); err != nil {
			return nil, err
		}
	}
	if v, ok := f["sweeper"]; ok {
		if cfg.Sweeper, err = parseSweeper(v); err != nil {
			return nil, err
		}
	}
	if v, ok := f["row_security"]; ok {
		s, err := v.str()
		if err != nil {
			return nil, err
		}
		if s != RowSecurityOff && s != RowSecurityRequired {
			return nil, fmt.Errorf("%s: %q is not one of %s, %s", v.path, s, RowSecurityOff, RowSecurityRequired)
		}
		if s == RowSecurityRequired && cfg.DDLEventsLogin() == "" {
			return nil, fmt.Errorf("%s: %s needs DDL events, so that a policy dropped outside the proxy is seen at once: set ddl_events_dsn (or a sweeper dsn) and run ttlproxy install --ddl-events", v.path, s)
		}
		cfg.RowSecurity = s
	}
	return cfg, nil
}

// DDLEventsLogin returns the connection string the proxy listens for DDL
// events with: ddl_events_dsn, else the sweeper's, else "" (none).
func (c *Config) DDLEventsLogin() string {
	if c.DDLEventsDSN != "" {
		return c.DDLEventsDSN
	}
	if c.Sweeper != nil {
		return c.Sweeper.DSN
	}
	return ""
}

// address checks a host:port value. The upstream needs a host; a listen
// address may leave it empty (all interfaces).
func address(f field, needHost bool) (string, error) {
	s, err := f.str()
	if err != nil {
		return "", err
	}
	if err := CheckAddress(s, needHost); err != nil {
		return "", fmt.Errorf("%s: %w", f.path, err)
	}
	return s, nil
}

// CheckAddress reports whether s is a usable host:port; needHost refuses an
// empty host. Flags that override the file's addresses use it too.
func CheckAddress(s string, needHost bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("invalid address %q: want host:port", s)
	}
	if needHost && host == "" {
		return fmt.Errorf("invalid address %q: host is empty", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 || (needHost && p == 0) {
		return fmt.Errorf("invalid address %q: bad port %q", s, port)
	}
	return nil
}

// parseFunctionNames parses a list of function names, "schema.name" or
// "name".
func parseFunctionNames(v field) ([]string, error) {
	items, err := v.strings()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(items))
	for i, item := range items {
		schema, name, err := parseQualified(item, "")
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", v.path, i, err)
		}
		out[i] = name
		if schema != "" {
			out[i] = schema + "." + name
		}
	}
	return out, nil
}

func parseUpstreamTLS(v field) (*UpstreamTLS, error) {
	f, err := mapping(v.val, v.path, "sslmode", "sslrootcert", "sslcert", "sslkey")
	if err != nil {
		return nil, err
	}
	u := &UpstreamTLS{SSLMode: "prefer"}
	for _, k := range []struct {
		key string
		dst *string
	}{{"sslmode", &u.SSLMode}, {"sslrootcert", &u.SSLRootCert}, {"sslcert", &u.SSLCert}, {"sslkey", &u.SSLKey}} {
		if x, ok := f[k.key]; ok {
			if *k.dst, err = x.str(); err != nil {
				return nil, err
			}
		}
	}
	switch u.SSLMode {
	case "disable", "prefer", "require", "verify-ca", "verify-full":
	default:
		return nil, fmt.Errorf("%s.sslmode: %q is not one of disable, prefer, require, verify-ca, verify-full", v.path, u.SSLMode)
	}
	if (u.SSLCert == "") != (u.SSLKey == "") {
		return nil, fmt.Errorf("%s: sslcert and sslkey go together", v.path)
	}
	return u, nil
}

func parseAdmin(v field, a *Admin) error {
	f, err := mapping(v.val, v.path, "web_config_file", "enable_status", "enable_lifecycle", "bearer_token_file")
	if err != nil {
		return err
	}
	for _, k := range []struct {
		key string
		dst *string
	}{{"web_config_file", &a.WebConfigFile}, {"bearer_token_file", &a.BearerTokenFile}} {
		if x, ok := f[k.key]; ok {
			if *k.dst, err = x.str(); err != nil {
				return err
			}
		}
	}
	for _, k := range []struct {
		key string
		dst *bool
	}{{"enable_status", &a.EnableStatus}, {"enable_lifecycle", &a.EnableLifecycle}} {
		if x, ok := f[k.key]; ok {
			if *k.dst, err = x.boolean(); err != nil {
				return err
			}
		}
	}
	return nil
}

func parseTLS(v field) (*TLS, error) {
	f, err := mapping(v.val, v.path, "cert_file", "key_file")
	if err != nil {
		return nil, err
	}
	t := &TLS{}
	for _, k := range []string{"cert_file", "key_file"} {
		if !f.has(k) {
			return nil, fmt.Errorf("%s: required", join(v.path, k))
		}
	}
	if t.CertFile, err = f["cert_file"].str(); err != nil {
		return nil, err
	}
	if t.KeyFile, err = f["key_file"].str(); err != nil {
		return nil, err
	}
	return t, nil
}

func parseUpstreamTCP(v field, u *UpstreamTCP) error {
	f, err := mapping(v.val, v.path, "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout")
	if err != nil {
		return err
	}
	if x, ok := f["keepalives"]; ok {
		on, err := x.boolean()
		if err != nil {
			return err
		}
		u.KeepalivesDisabled = !on
	}
	for _, k := range []struct {
		key string
		dst *time.Duration
	}{{"keepalives_idle", &u.KeepalivesIdle}, {"keepalives_interval", &u.KeepalivesInterval}} {
		x, ok := f[k.key]
		if !ok {
			continue
		}
		if *k.dst, err = x.positiveDuration(); err != nil {
			return err
		}
		// TCP_KEEPIDLE and TCP_KEEPINTVL count whole seconds.
		if *k.dst%time.Second != 0 {
			return fmt.Errorf("%s: must be whole seconds, got %q", x.path, x.val.Value)
		}
	}
	if x, ok := f["keepalives_count"]; ok {
		if u.KeepalivesCount, err = x.positiveInt(); err != nil {
			return err
		}
	}
	if x, ok := f["tcp_user_timeout"]; ok {
		d, err := x.duration()
		if err != nil {
			return err
		}
		if d < 0 || (d > 0 && d%time.Millisecond != 0) {
			return fmt.Errorf("%s: must be 0s (none) or whole milliseconds, got %q", x.path, x.val.Value)
		}
		u.TCPUserTimeout = &d
	}
	return nil
}

func parseLimits(v field, l *Limits) error {
	f, err := mapping(v.val, v.path, "max_statement_bytes", "max_nesting_depth", "max_message_bytes", "max_client_connections")
	if err != nil {
		return err
	}
	for _, k := range []struct {
		key string
		dst *int
	}{
		{"max_statement_bytes", &l.MaxStatementBytes},
		{"max_nesting_depth", &l.MaxNestingDepth},
		{"max_message_bytes", &l.MaxMessageBytes},
		{"max_client_connections", &l.MaxClientConnections},
	} {
		if x, ok := f[k.key]; ok {
			if *k.dst, err = x.positiveInt(); err != nil {
				return err
			}
		}
	}
	return nil
}

func parseSweeper(v field) (*Sweeper, error) {
	f, err := mapping(v.val, v.path, "dsn", "interval", "batch_size", "batch_pause", "batch_timeout",
		"target_batch_duration", "max_batch_size", "workers", "drop_expired_partitions", "cdc_origin",
		"min_rows_per_second")
	if err != nil {
		return nil, err
	}
	s := &Sweeper{}
	if !f.has("dsn") {
		return nil, fmt.Errorf("%s.dsn: required", v.path)
	}
	if s.DSN, err = f["dsn"].str(); err != nil {
		return nil, err
	}
	if x, ok := f["interval"]; ok {
		if s.Interval, err = x.positiveDuration(); err != nil {
			return nil, err
		}
	}
	if x, ok := f["batch_size"]; ok {
		if s.BatchSize, err = x.positiveInt(); err != nil {
			return nil, err
		}
	}
	if x, ok := f["batch_pause"]; ok {
		d, err := x.duration()
		if err != nil {
			return nil, err
		}
		s.BatchPause = &d
	}
	if x, ok := f["batch_timeout"]; ok {
		if s.BatchTimeout, err = x.positiveDuration(); err != nil {
			return nil, err
		}
	}
	if x, ok := f["target_batch_duration"]; ok {
		d, err := x.duration()
		if err != nil {
			return nil, err
		}
		s.TargetBatchDuration = &d
	}
	if x, ok := f["max_batch_size"]; ok {
		if s.MaxBatchSize, err = x.positiveInt(); err != nil {
			return nil, err
		}
	}
	if x, ok := f["workers"]; ok {
		if s.Workers, err = x.positiveInt(); err != nil {
			return nil, err
		}
	}
	if x, ok := f["min_rows_per_second"]; ok {
		if s.MinRowsPerSecond, err = x.positiveInt(); err != nil {
			return nil, err
		}
	}
	if x, ok := f["drop_expired_partitions"]; ok {
		if s.DropExpiredPartitions, err = x.boolean(); err != nil {
			return nil, err
		}
	}
	if x, ok := f["cdc_origin"]; ok {
		if s.CDCOrigin, err = x.str(); err != nil {
			return nil, err
		}
		// pg_replication_origin_create refuses longer names
		// (MAX_RONAME_LEN, src/include/replication/origin.h).
		if len(s.CDCOrigin) > 512 {
			return nil, fmt.Errorf("%s: a replication origin name is at most 512 bytes, got %d", x.path, len(s.CDCOrigin))
		}
	}
	return s, nil
}
