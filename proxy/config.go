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

	// rewriter replaces Rewriter.Rewrite when set (tests).
	rewriter statementRewriter
	// dialTCP replaces d.DialContext(ctx, "tcp", addr) when set (tests): it
	// must dial with d, whose settings are the ones under test.
	dialTCP func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error)
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
	if c.MaxClientConnections < 0 || c.IdleSessionTimeout < 0 {
		return errors.New("proxy: MaxClientConnections and IdleSessionTimeout must not be negative")
	}
	// The rewriter follows SET ROLE in a text with the same roles.
	if a, b := slices.Sorted(slices.Values(c.BypassRoles)), slices.Sorted(slices.Values(c.Rewriter.Options().BypassRoles)); !slices.Equal(slices.Compact(a), slices.Compact(b)) {
		return fmt.Errorf("proxy: BypassRoles %v differ from the rewriter's %v", c.BypassRoles, c.Rewriter.Options().BypassRoles)
	}
	// A statement the rewriter accepts must fit in one message.
	if stmt := c.Rewriter.Options().MaxStatementBytes; c.MaxMessageBytes < stmt {
		return fmt.Errorf("proxy: max message bytes (%d) is smaller than the rewriter's max statement bytes (%d)", c.MaxMessageBytes, stmt)
	}
	return nil
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
