package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// Defaults for the zero values of Config.
const (
	DefaultDialTimeout = 5 * time.Second
	// DefaultShutdownTimeout: below the 30s grace period container runtimes
	// give before SIGKILL.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultMaxMessageBytes caps one client message: 64 MiB leaves room for
	// large bind values and COPY chunks, while a Query or Parse (the only
	// messages the proxy holds whole) cannot make it buffer gigabytes.
	// PostgreSQL's own limit is 1 GiB (PQ_LARGE_MESSAGE_LIMIT).
	DefaultMaxMessageBytes = 64 << 20
	// DefaultClientLoginTimeout is PgBouncer's client_login_timeout and
	// PostgreSQL's authentication_timeout: 60 seconds.
	DefaultClientLoginTimeout = 60 * time.Second
	// DefaultCatalogTTL bounds how stale a session's view of the TTL
	// tables, and of the views and functions that read them, can be after
	// DDL made elsewhere.
	DefaultCatalogTTL = 30 * time.Second
	// DefaultKeepalivesIdle, DefaultKeepalivesInterval and
	// DefaultKeepalivesCount: a silent upstream is probed after 30 s and
	// given up after three unanswered probes 10 s apart, one minute in all,
	// the same bound as DefaultTCPUserTimeout. Linux's own defaults (7200 s,
	// 75 s, 9) take over two hours.
	DefaultKeepalivesIdle     = 30 * time.Second
	DefaultKeepalivesInterval = 10 * time.Second
	DefaultKeepalivesCount    = 3
	// DefaultTCPUserTimeout bounds how long data sent upstream may go
	// unacknowledged (or wait on a closed window) before the connection is
	// dropped: without it Linux retransmits for about 15 minutes
	// (tcp_retries2 = 15). It equals idle + interval × count, so that it
	// does not cut the keepalive probes short ("When TCP sockets refuse to
	// die", Cloudflare, 2019).
	DefaultTCPUserTimeout = 60 * time.Second
)

// Pool modes, PgBouncer's pool_mode. In session mode (the default) each
// client has a server connection of its own, logged in with the client's
// own credentials, for as long as it is connected. In transaction mode
// clients share the server connections of a pool per database, user and
// keyed startup parameters, each holding one for a transaction
// (docs/design/pooling.md); the proxy then authenticates clients itself
// (Config.Auth) and Config.Pool bounds the pools.
const (
	PoolModeSession     = "session"
	PoolModeTransaction = "transaction"
)

// Defaults for the zero values of PoolSettings: PgBouncer's.
const (
	DefaultPoolSize             = 20
	DefaultReservePoolTimeout   = 5 * time.Second
	DefaultServerLifetime       = time.Hour
	DefaultServerIdleTimeout    = 10 * time.Minute
	DefaultServerConnectTimeout = 15 * time.Second
	DefaultServerLoginRetry     = 15 * time.Second
	DefaultQueryWaitTimeout     = 120 * time.Second
)

// Config configures a Server.
type Config struct {
	// Upstream is the host:port of the PostgreSQL server.
	Upstream string
	// TLSConfig is the client-facing TLS configuration; nil answers every
	// SSLRequest with 'N'.
	TLSConfig *tls.Config
	// UpstreamTLS configures TLS to Upstream; nil means sslmode prefer
	// without certificates.
	UpstreamTLS *UpstreamTLS
	// Rewriter rewrites Query and Parse texts; required.
	Rewriter *rewrite.Rewriter
	// BypassRoles lists roles whose sessions are not filtered or stamped:
	// session_user or current_user in this list sets rewrite.Session.Bypass
	// (re-checked whenever the role may have changed). The Rewriter must
	// have the same list (rewrite.Options.BypassRoles).
	BypassRoles []string
	// Logger receives the proxy's logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the proxy's metrics; nil means no metrics.
	Registerer prometheus.Registerer
	// DialTimeout bounds connecting to Upstream; 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// UpstreamTCP sets TCP keepalive and TCP_USER_TIMEOUT on the sockets to
	// Upstream, so that a server or network that vanishes without a reset
	// ends the session within a bounded time.
	UpstreamTCP UpstreamTCP
	// ShutdownTimeout is how long in-flight statements may finish once Serve's
	// context is cancelled; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// MaxMessageBytes caps one client message (type byte and length
	// included); a larger one closes that client with an ErrorResponse
	// (SQLSTATE 54000). 0 means DefaultMaxMessageBytes; it must not be
	// smaller than the Rewriter's MaxStatementBytes.
	MaxMessageBytes int
	// MaxClientConnections caps the client connections open at once; a
	// client beyond it is refused at startup with SQLSTATE 53300. 0 means
	// no limit.
	MaxClientConnections int
	// ClientLoginTimeout bounds a client's startup: from its connection
	// to the end of authentication (TLS handshake and startup packets
	// included); a client still logging in then is closed (SQLSTATE
	// 57014, as the server's authentication_timeout). 0 means
	// DefaultClientLoginTimeout.
	ClientLoginTimeout time.Duration
	// IdleSessionTimeout closes a client that sends nothing for this long
	// while its session is idle outside a transaction block (SQLSTATE
	// 57P05, as the server's idle_session_timeout). 0 means never.
	IdleSessionTimeout time.Duration
	// IdleTransactionTimeout closes a client that sends nothing for this
	// long while its session is idle inside a transaction block (SQLSTATE
	// 25P03, as the server's idle_in_transaction_session_timeout;
	// PgBouncer's idle_transaction_timeout): in transaction mode such a
	// client holds a server connection of the pool. 0 means never.
	IdleTransactionTimeout time.Duration
	// CatalogTTL is how long a database's catalog snapshot (columns and keys
	// of the TTL tables, the views and functions that read them) is reused
	// by new sessions and kept by a session before it takes a younger one
	// (refresh.go's ageCatalog); 0 means DefaultCatalogTTL.
	CatalogTTL time.Duration
	// DDLEventsDSN is the connection string (URL or key=value, as libpq)
	// of the login the proxy listens for DDL events with and reads the
	// catalog with after them, per database with the database name replaced
	// by the session's (ddlevents.go). Any login that may connect works:
	// the catalog is readable by all. "" means no DDL events: DDL made
	// outside the proxy reaches sessions within CatalogTTL.
	DDLEventsDSN string
	// PoolMode is PoolModeSession or PoolModeTransaction; "" means
	// PoolModeSession. Auth and Pool apply in transaction mode only.
	PoolMode string
	// Auth is how the proxy itself authenticates clients in transaction
	// mode.
	Auth AuthConfig
	// Pool bounds the pools of server connections in transaction mode.
	Pool PoolSettings
	// PeerID is the instance's peer_id, 1 to MaxPeerID, carried in bits
	// 29–16 of the process ID of the keys it gives clients in transaction
	// mode (docs/design/pooling.md §5); 0 means not peered. Session mode
	// ignores it and Peers: clients hold the server's own keys there.
	PeerID int
	// Peers are the instances a CancelRequest is forwarded to in
	// transaction mode when its key carries their id (PgBouncer's
	// [peers]); the same list in every instance, an entry with PeerID's
	// own id is ignored. Ids and addresses are unique; a non-empty list
	// needs PeerID.
	Peers []Peer

	// rewriter replaces Rewriter.Rewrite when set (tests).
	rewriter statementRewriter
	// dialTCP replaces d.DialContext(ctx, "tcp", addr) when set (tests): it
	// must dial with d, whose settings are the ones under test.
	dialTCP func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error)
}

// MaxPeerID is the largest peer id: 14 bits of the process ID, PgBouncer's
// range.
const MaxPeerID = cancelPIDMark>>cancelPeerShift - 1

// Peer is another instance of the deployment.
type Peer struct {
	// ID is the peer's own PeerID, 1 to MaxPeerID.
	ID int
	// Addr is the host:port its clients connect to, naming that one
	// instance (in Kubernetes a StatefulSet pod's name through a headless
	// Service, never a load-balanced Service); it is resolved at each
	// forward.
	Addr string
}

// UpstreamTCP configures the TCP sockets to the upstream server, with
// libpq's names (keepalives, keepalives_idle, keepalives_interval,
// keepalives_count, tcp_user_timeout).
type UpstreamTCP struct {
	// KeepalivesDisabled turns TCP keepalive off (libpq's keepalives=0).
	KeepalivesDisabled bool
	// KeepalivesIdle is how long the connection is silent before the
	// first probe (TCP_KEEPIDLE, whole seconds); 0 means
	// DefaultKeepalivesIdle.
	KeepalivesIdle time.Duration
	// KeepalivesInterval is the time between unanswered probes
	// (TCP_KEEPINTVL, whole seconds); 0 means DefaultKeepalivesInterval.
	KeepalivesInterval time.Duration
	// KeepalivesCount is how many unanswered probes drop the connection
	// (TCP_KEEPCNT); 0 means DefaultKeepalivesCount.
	KeepalivesCount int
	// TCPUserTimeout is how long sent data may stay unacknowledged, or
	// unsent behind a zero window, before the connection is dropped
	// (TCP_USER_TIMEOUT, milliseconds); while probes go unanswered it also
	// ends the connection this long after the last packet received. 0
	// means DefaultTCPUserTimeout; negative leaves the system's behaviour
	// (no timeout).
	TCPUserTimeout time.Duration
}

// AuthConfig is how clients are authenticated in transaction mode, with
// PgBouncer's keys (auth_type, auth_file, auth_query, auth_dsn). One of
// File and DSN is required unless Type is trust; not both.
type AuthConfig struct {
	// Type is scram-sha-256 (""), md5, plain or trust (anyone listed in
	// File or found by Query, or anyone at all without either).
	Type string
	// File is an auth_file in PgBouncer's userlist.txt format: one
	// "user" "secret" line per user, the secret a SCRAM verifier, an
	// "md5…" hash or a plain password.
	File string
	// Query is the auth_query, run on DSN for each client login with the
	// user name as $1 and, when it takes a second parameter, the database
	// as $2; it returns at most one row (username, password[, settings]).
	// "" means DefaultAuthQuery, which calls the function `ttlproxy
	// install --auth-query` creates. It needs DSN.
	Query string
	// DSN is the auth_dsn: the connection string (URL or key=value, as
	// libpq) of the login that runs Query, on the upstream server; the
	// password comes from the string, PGPASSWORD or .pgpass. It is never
	// logged.
	DSN string
}

// PoolSettings bound the pools of transaction mode, with PgBouncer's
// settings of the same names (docs/design/pooling.md §1). A zero field
// means its default; a negative duration disables what PgBouncer's 0
// disables, where the field says so.
type PoolSettings struct {
	// DefaultPoolSize is default_pool_size: the server connections one
	// pool (database, user, keyed startup parameters) may hold; 0 means
	// DefaultPoolSize.
	DefaultPoolSize int
	// MinPoolSize is min_pool_size: server connections a pool keeps open
	// once a client login has given it credentials; at most
	// DefaultPoolSize. 0 keeps none.
	MinPoolSize int
	// ReservePoolSize is reserve_pool_size: server connections a pool may
	// open beyond DefaultPoolSize for clients that have waited
	// ReservePoolTimeout. 0 means no reserve.
	ReservePoolSize int
	// ReservePoolTimeout is reserve_pool_timeout; 0 means
	// DefaultReservePoolTimeout; negative opens the reserve for any
	// waiting client at once.
	ReservePoolTimeout time.Duration
	// MaxDBConnections is max_db_connections: server connections to one
	// database across its pools. 0 means no limit.
	MaxDBConnections int
	// ServerLifetime is server_lifetime: a server connection older than
	// this is closed when it is released; 0 means DefaultServerLifetime;
	// negative means no limit. (PgBouncer's 0, one use per connection,
	// has no equivalent.)
	ServerLifetime time.Duration
	// ServerIdleTimeout is server_idle_timeout: a server connection idle
	// for longer is closed, never below MinPoolSize; 0 means
	// DefaultServerIdleTimeout; negative means never (PgBouncer's 0).
	ServerIdleTimeout time.Duration
	// ServerConnectTimeout is server_connect_timeout: the bound on one
	// server login (connection, TLS, authentication); 0 means
	// DefaultServerConnectTimeout.
	ServerConnectTimeout time.Duration
	// ServerLoginRetry is server_login_retry: after a failed server
	// login, clients that would need a new server connection fail at once
	// for this long; 0 means DefaultServerLoginRetry; negative means they
	// try again at once (PgBouncer's 0).
	ServerLoginRetry time.Duration
	// QueryWaitTimeout is query_wait_timeout: the bound on a client's
	// wait for a server connection; 0 means DefaultQueryWaitTimeout;
	// negative means no bound (PgBouncer's 0).
	QueryWaitTimeout time.Duration
	// MaxPinnedConnections is max_pinned_connections: clients of one pool
	// that may keep their server connection at once (pinned by temporary
	// objects, advisory locks, LISTEN, …); a statement that would pin one
	// more is refused with 53000 and not run. 0 means half of
	// DefaultPoolSize, at least 1; negative means no limit.
	MaxPinnedConnections int
}

// statementRewriter is what the message loop needs from a rewriter.
type statementRewriter interface {
	Rewrite(sql string, st *rewrite.State) (rewrite.Result, error)
}

func (c *Config) setDefaults() error {
	if c.Upstream == "" {
		return errors.New("proxy: Config.Upstream is empty")
	}
	if c.Rewriter == nil {
		return errors.New("proxy: Config.Rewriter is nil")
	}
	if c.rewriter == nil {
		c.rewriter = c.Rewriter
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if err := c.UpstreamTCP.setDefaults(); err != nil {
		return err
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.CatalogTTL <= 0 {
		c.CatalogTTL = DefaultCatalogTTL
	}
	if c.ClientLoginTimeout <= 0 {
		c.ClientLoginTimeout = DefaultClientLoginTimeout
	}
	if c.MaxClientConnections < 0 || c.IdleSessionTimeout < 0 || c.IdleTransactionTimeout < 0 {
		return errors.New("proxy: MaxClientConnections, IdleSessionTimeout and IdleTransactionTimeout must not be negative")
	}
	// The rewriter follows SET ROLE in a text with the same roles.
	if a, b := slices.Sorted(slices.Values(c.BypassRoles)), slices.Sorted(slices.Values(c.Rewriter.Options().BypassRoles)); !slices.Equal(slices.Compact(a), slices.Compact(b)) {
		return fmt.Errorf("proxy: BypassRoles %v differ from the rewriter's %v", c.BypassRoles, c.Rewriter.Options().BypassRoles)
	}
	// A statement the rewriter accepts must fit in one message.
	if stmt := c.Rewriter.Options().MaxStatementBytes; c.MaxMessageBytes < stmt {
		return fmt.Errorf("proxy: max message bytes (%d) is smaller than the rewriter's max statement bytes (%d)", c.MaxMessageBytes, stmt)
	}
	return c.setPoolDefaults()
}

// setPoolDefaults checks PoolMode, Auth and Pool and fills Pool's defaults.
// Errors name the configuration file's keys.
func (c *Config) setPoolDefaults() error {
	switch c.PoolMode {
	case "":
		c.PoolMode = PoolModeSession
	case PoolModeSession, PoolModeTransaction:
	default:
		return fmt.Errorf("pool_mode: %q is not one of %s, %s", c.PoolMode, PoolModeSession, PoolModeTransaction)
	}
	if err := c.Pool.setDefaults(); err != nil {
		return err
	}
	if err := c.checkPeers(); err != nil {
		return err
	}
	if c.PoolMode != PoolModeTransaction {
		return nil
	}
	return c.Auth.check()
}

// checkPeers checks PeerID and Peers; errors name the configuration file's
// keys (Peers[i] is peers[i]).
func (c *Config) checkPeers() error {
	if c.PeerID < 0 || c.PeerID > MaxPeerID {
		return fmt.Errorf("peer_id: %d is not between 0 and %d", c.PeerID, MaxPeerID)
	}
	if len(c.Peers) > 0 && c.PeerID == 0 {
		return errors.New("peer_id: required with peers (or serve --peer-id)")
	}
	ids, addrs := make(map[int]int, len(c.Peers)), make(map[string]int, len(c.Peers))
	for i, p := range c.Peers {
		if p.ID < 1 || p.ID > MaxPeerID {
			return fmt.Errorf("peers[%d].id: %d is not between 1 and %d", i, p.ID, MaxPeerID)
		}
		if j, dup := ids[p.ID]; dup {
			return fmt.Errorf("peers[%d].id: %d is peers[%d]'s too", i, p.ID, j)
		}
		ids[p.ID] = i
		if _, _, err := net.SplitHostPort(p.Addr); err != nil {
			return fmt.Errorf("peers[%d].host: invalid address %q: want host:port", i, p.Addr)
		}
		if j, dup := addrs[p.Addr]; dup {
			return fmt.Errorf("peers[%d].host: %s is peers[%d]'s address too", i, p.Addr, j)
		}
		addrs[p.Addr] = i
	}
	return nil
}

// check does auth.New's checks but for loading the auth_file and
// connecting to auth_dsn, so that New reports a bad setting first.
func (a *AuthConfig) check() error {
	switch a.Type {
	case "", auth.SCRAM, auth.MD5, auth.Plain, auth.Trust:
	default:
		return fmt.Errorf("auth_type: %q is not one of %s, %s, %s, %s", a.Type, auth.SCRAM, auth.MD5, auth.Plain, auth.Trust)
	}
	switch {
	case a.File != "" && a.DSN != "":
		return errors.New("auth_file and auth_dsn: set one of them, not both")
	case a.Query != "" && a.DSN == "":
		return errors.New("auth_query: needs auth_dsn, the login that runs it")
	case a.File == "" && a.DSN == "" && a.Type != auth.Trust:
		return errors.New("auth_file or auth_dsn: one is required in pool_mode transaction unless auth_type is trust")
	}
	return nil
}

func (p *PoolSettings) setDefaults() error {
	for _, n := range []struct {
		key string
		v   int
	}{
		{"default_pool_size", p.DefaultPoolSize},
		{"min_pool_size", p.MinPoolSize},
		{"reserve_pool_size", p.ReservePoolSize},
		{"max_db_connections", p.MaxDBConnections},
	} {
		if n.v < 0 {
			return fmt.Errorf("%s: must not be negative, got %d", n.key, n.v)
		}
	}
	if p.ServerConnectTimeout < 0 {
		return fmt.Errorf("server_connect_timeout: must not be negative, got %v", p.ServerConnectTimeout)
	}
	if p.DefaultPoolSize == 0 {
		p.DefaultPoolSize = DefaultPoolSize
	}
	if p.MaxPinnedConnections == 0 {
		p.MaxPinnedConnections = max(p.DefaultPoolSize/2, 1)
	}
	if p.MinPoolSize > p.DefaultPoolSize {
		return fmt.Errorf("min_pool_size: %d is larger than default_pool_size (%d)", p.MinPoolSize, p.DefaultPoolSize)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{
		{&p.ReservePoolTimeout, DefaultReservePoolTimeout},
		{&p.ServerLifetime, DefaultServerLifetime},
		{&p.ServerIdleTimeout, DefaultServerIdleTimeout},
		{&p.ServerConnectTimeout, DefaultServerConnectTimeout},
		{&p.ServerLoginRetry, DefaultServerLoginRetry},
		{&p.QueryWaitTimeout, DefaultQueryWaitTimeout},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	return nil
}

// DefaultAuthQuery is the auth_query run when none is configured: the
// function ttlproxy install --auth-query creates (auth.DefaultQuery).
const DefaultAuthQuery = auth.DefaultQuery

// authConfig is what auth.New takes. Call after setDefaults.
func (c *Config) authConfig() auth.Config {
	return auth.Config{Type: c.Auth.Type, File: c.Auth.File, DSN: c.Auth.DSN, Query: c.Auth.Query, Logger: c.Logger,
		DialFunc: c.UpstreamTCP.DialFunc()}
}

// poolConfig is what newPool takes, for every pool alike. Call after
// setDefaults: a negative duration (disabled) becomes the pool's 0.
// MaxDBConnections is not in it: it bounds a database's pools together
// (newDBSlots).
func (c *Config) poolConfig() poolConfig {
	p := &c.Pool
	off := func(d time.Duration) time.Duration { return max(d, 0) }
	return poolConfig{
		size:           p.DefaultPoolSize,
		minSize:        p.MinPoolSize,
		reserveSize:    p.ReservePoolSize,
		reserveTimeout: off(p.ReservePoolTimeout),
		lifetime:       off(p.ServerLifetime),
		idleTimeout:    off(p.ServerIdleTimeout),
		connectTimeout: p.ServerConnectTimeout,
		loginRetry:     off(p.ServerLoginRetry),
		waitTimeout:    off(p.QueryWaitTimeout),
		maxPinned:      p.MaxPinnedConnections,
	}
}

func (u *UpstreamTCP) setDefaults() error {
	if u.KeepalivesIdle < 0 || u.KeepalivesInterval < 0 || u.KeepalivesCount < 0 {
		return errors.New("proxy: UpstreamTCP keepalive settings must not be negative")
	}
	if u.KeepalivesIdle == 0 {
		u.KeepalivesIdle = DefaultKeepalivesIdle
	}
	if u.KeepalivesInterval == 0 {
		u.KeepalivesInterval = DefaultKeepalivesInterval
	}
	if u.KeepalivesCount == 0 {
		u.KeepalivesCount = DefaultKeepalivesCount
	}
	if u.TCPUserTimeout == 0 {
		u.TCPUserTimeout = DefaultTCPUserTimeout
	}
	// The kernel takes seconds and milliseconds: a finer value would be
	// truncated, a sub-second keepalive to 0, which it refuses.
	if u.KeepalivesIdle < time.Second || u.KeepalivesInterval < time.Second {
		return fmt.Errorf("proxy: UpstreamTCP keepalives idle (%v) and interval (%v) must be at least 1s", u.KeepalivesIdle, u.KeepalivesInterval)
	}
	if u.TCPUserTimeout > 0 && u.TCPUserTimeout < time.Millisecond {
		return fmt.Errorf("proxy: UpstreamTCP TCPUserTimeout (%v) must be at least 1ms", u.TCPUserTimeout)
	}
	return nil
}
