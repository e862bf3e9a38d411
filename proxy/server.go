package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
	"github.com/ttlproxy/ttlproxy/proxy/internal/metrics"
	"github.com/ttlproxy/ttlproxy/proxy/internal/upstream"
)

// Server is a PostgreSQL proxy. Create it with New and run it with Serve.
type Server struct {
	cfg       Config
	tlsConfig *tls.Config // cfg.TLSConfig offering ALPN "postgresql"
	log       *slog.Logger
	metrics   *metrics.Set
	// set is the newest rule set (reload.go); reloadMu orders reloads.
	set      atomic.Pointer[ruleSet]
	reloadMu sync.Mutex

	// dialer connects to the upstream server, with TLS as configured.
	dialer *upstream.Dialer

	// latency holds the sessions' recent busy periods (latency.go).
	latency *latencyWindow
	// events are the databases' DDL events (ddlevents.go).
	events *ddlEvents

	nextID atomic.Uint64
	// active counts the client connections open (MaxClientConnections).
	active atomic.Int64

	// auth and pools serve transaction mode (pooled.go); nil in session
	// mode.
	auth  *auth.Auth
	pools *poolSet
	// cancelKeys are the BackendKeyData handed to clients (cancel.go).
	cancelKeys *cancelKeys
	// serverPumps counts the pooled servers' pumps (runServer).
	serverPumps sync.WaitGroup

	mu       sync.Mutex
	sessions map[*clientConn]struct{}
	draining bool
	wg       sync.WaitGroup
}

// New validates cfg, applies defaults and registers the metrics.
func New(cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		sessions: make(map[*clientConn]struct{}),
		latency:  newLatencyWindow(),
	}
	s.set.Store(newRuleSet(&cfg, 1))
	var err error
	if s.events, err = newDDLEvents(s, cfg.DDLEventsDSN); err != nil {
		return nil, err
	}
	m, err := metrics.New(cfg.Registerer, metrics.Labels{CancelResults: cancelResults, PinReasons: pinReasons},
		func() metrics.ShapeStats { return shapeStats(s.set.Load().rw) })
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if cfg.Registerer != nil { // no series in session mode
		if err := cfg.Registerer.Register(poolCollector{s}); err != nil {
			return nil, fmt.Errorf("proxy: registering metrics: %w", err)
		}
	}
	if cfg.TLSConfig != nil {
		s.tlsConfig = cfg.TLSConfig.Clone()
		if !slices.Contains(s.tlsConfig.NextProtos, alpnProtocol) {
			s.tlsConfig.NextProtos = append(s.tlsConfig.NextProtos, alpnProtocol)
		}
	}
	sslMode, upTLS, err := upstreamTLS(cfg.UpstreamTLS, cfg.Upstream)
	if err != nil {
		return nil, err
	}
	s.dialer = &upstream.Dialer{Addr: cfg.Upstream, Timeout: cfg.DialTimeout, Net: cfg.UpstreamTCP.dialer(),
		DialTCP: cfg.dialTCP, TLS: upTLS, SSLMode: sslMode}
	if cfg.PoolMode == PoolModeTransaction {
		if s.auth, err = auth.New(cfg.authConfig()); err != nil {
			return nil, err
		}
		s.pools = newPoolSet(s, cfg.poolConfig(), cfg.Pool.MaxDBConnections)
		s.cancelKeys = newCancelKeys(uint32(cfg.PeerID)) //nolint:gosec // checkPeers bounds it to 0..MaxPeerID
	}
	return s, nil
}

// Serve accepts connections on ln until ctx is cancelled, then closes ln,
// lets sessions finish their in-flight statements (at most
// Config.ShutdownTimeout), closes the rest and returns nil. It returns an
// error when ln fails for another reason, after the same drain.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	// At shutdown the listener closes at once: with SO_REUSEPORT the kernel
	// then routes new connections to the other instances. (Connections it
	// had already queued on this listener are reset with it; Linux 5.14+
	// moves them to another listener of the port instead when
	// net.ipv4.tcp_migrate_req is 1.)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	defer s.events.start(ctx)()
	s.warnCatalogWindow(ctx)
	if s.set.Load().rw.RequiresRowSecurity() {
		s.watchEventsDatabase()
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go s.sweepSessions(sweepCtx)
	s.log.Info("proxy listening", "listen_addr", ln.Addr().String(), "upstream", s.cfg.Upstream)

	var serveErr error
	var backoff time.Duration
	var lastLog time.Time
	suppressed := 0
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			reason, transient := acceptErrorReason(err)
			if !transient {
				serveErr = fmt.Errorf("proxy: accepting connections: %w", err)
				break
			}
			// Out of file descriptors or kernel memory: the clients already
			// served go on, and the ones waiting in the listen backlog are
			// accepted once some close. Back off as net/http does (5 ms
			// doubling to 1 s) and log at most once a second.
			s.metrics.AcceptErrors.WithLabelValues(reason).Inc()
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if now := time.Now(); now.Sub(lastLog) >= time.Second {
				s.log.Warn("accepting connection", "err", err, "reason", reason,
					"retry_in", backoff, "suppressed", suppressed)
				lastLog, suppressed = now, 0
			} else {
				suppressed++
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		s.startSession(conn)
	}
	s.drain()
	if s.pools != nil {
		s.pools.close()
		s.serverPumps.Wait()
	}
	return serveErr
}

func (s *Server) startSession(conn net.Conn) {
	sess := newClientConn(s, conn)
	s.mu.Lock()
	s.sessions[sess] = struct{}{}
	draining := s.draining
	s.wg.Add(1)
	s.mu.Unlock()
	if draining {
		sess.beginShutdown()
	}
	s.active.Add(1)
	go func() {
		_ = wire.GrowStack(0)
		defer s.wg.Done()
		defer s.active.Add(-1)
		defer func() {
			s.mu.Lock()
			delete(s.sessions, sess)
			s.mu.Unlock()
		}()
		sess.run()
	}()
}

// drain asks every session to close once idle, waits up to ShutdownTimeout,
// then closes what is left and waits for it.
func (s *Server) drain() {
	s.mu.Lock()
	s.draining = true
	sessions := make([]*clientConn, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	s.log.Info("proxy shutting down", "sessions", len(sessions))
	for _, sess := range sessions {
		sess.beginShutdown()
	}

	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
		return
	case <-timer.C:
	}
	s.mu.Lock()
	sessions = sessions[:0]
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	s.log.Warn("shutdown timeout: closing busy sessions", "sessions", len(sessions))
	var closing sync.WaitGroup
	for _, sess := range sessions {
		closing.Go(sess.forceClose)
	}
	closing.Wait()
	<-done
}

// acceptErrorReason classifies an error from Accept: transient errors (the
// process or the system out of file descriptors, the kernel out of socket
// buffers or memory, a timeout) are retried by Serve; the reason is the
// label of ttlproxy_proxy_accept_errors_total.
func acceptErrorReason(err error) (reason string, transient bool) {
	switch {
	case errors.Is(err, syscall.EMFILE):
		return "emfile", true
	case errors.Is(err, syscall.ENFILE):
		return "enfile", true
	case errors.Is(err, syscall.ENOBUFS):
		return "enobufs", true
	case errors.Is(err, syscall.ENOMEM):
		return "enomem", true
	}
	if wire.IsTimeout(err) {
		return "timeout", true
	}
	return "", false
}

// CheckUpstream dials the upstream server (and negotiates TLS as
// configured) and closes the connection: a readiness check.
func (s *Server) CheckUpstream(ctx context.Context) error {
	conn, err := s.dialer.Dial(ctx)
	if err != nil {
		return err
	}
	return conn.Close()
}
