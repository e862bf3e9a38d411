package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/sweeper"
)

// Admin HTTP timeouts: the endpoints are small and local.
const (
	readyzTimeout        = 2 * time.Second
	adminShutdownTimeout = 5 * time.Second
)

// stack is one running ttlproxy: the proxy, the optional sweeper and the
// admin HTTP server, wired from a validated configuration.
type stack struct {
	cfg      *config.Config
	log      *slog.Logger
	registry *prometheus.Registry
	proxy    *proxy.Server
	admin    *http.Server
	draining atomic.Bool
	// access is who may read /status and POST /-/reload (admin.go); a
	// reload replaces it.
	access atomic.Pointer[adminAccess]
	// clientCert is the certificate presented to clients (nil without
	// tls); a reload reads the files again.
	clientCert atomic.Pointer[tls.Certificate]

	// reloadMu orders reloads (reload.go) and guards sweeper and cfg.
	reloadMu sync.Mutex
	// sweeper is nil without a sweeper section. Its metrics are
	// sweeperMetrics, in sweeperReg, made with the first sweeper and kept
	// by the ones a reload builds.
	sweeper        *sweeper.Sweeper
	sweeperMetrics *sweeper.Metrics
	sweeperReg     atomic.Pointer[prometheus.Registry]
	// sweeperCtx is what a sweeper started by a reload runs under.
	sweeperCtx context.Context
	// reload rereads the configuration (nil: not reloadable); the gauges
	// report the last attempt.
	reloadFrom   func() (*config.Config, error)
	reloadOK     prometheus.Gauge
	reloadOKTime prometheus.Gauge
}

// buildUpstreamTLS loads the files of the upstream_tls section.
func buildUpstreamTLS(u *config.UpstreamTLS) (*proxy.UpstreamTLS, error) {
	if u == nil {
		return nil, nil
	}
	c := &tls.Config{}
	if u.SSLRootCert != "" {
		pem, err := os.ReadFile(u.SSLRootCert)
		if err != nil {
			return nil, err
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", u.SSLRootCert)
		}
	}
	if u.SSLCert != "" {
		cert, err := tls.LoadX509KeyPair(u.SSLCert, u.SSLKey)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return &proxy.UpstreamTLS{SSLMode: u.SSLMode, Config: c}, nil
}

// upstreamTCP maps the upstream_tcp section onto the proxy's settings: a
// tcp_user_timeout of 0s turns the timeout off, which the proxy spells as a
// negative value.
func upstreamTCP(u config.UpstreamTCP) proxy.UpstreamTCP {
	p := proxy.UpstreamTCP{
		KeepalivesDisabled: u.KeepalivesDisabled,
		KeepalivesIdle:     u.KeepalivesIdle,
		KeepalivesInterval: u.KeepalivesInterval,
		KeepalivesCount:    u.KeepalivesCount,
	}
	if u.TCPUserTimeout != nil {
		p.TCPUserTimeout = *u.TCPUserTimeout
		if p.TCPUserTimeout == 0 {
			p.TCPUserTimeout = -1
		}
	}
	return p
}

// poolSettings maps the file's pooling keys onto the proxy's: a key left
// out stays zero (the proxy's default), and 0s, which disables as in
// PgBouncer, becomes the proxy's negative.
func poolSettings(p config.Pool) proxy.PoolSettings {
	off := func(d *time.Duration) time.Duration {
		switch {
		case d == nil:
			return 0
		case *d == 0:
			return -1
		}
		return *d
	}
	return proxy.PoolSettings{
		DefaultPoolSize:      p.DefaultPoolSize,
		MinPoolSize:          p.MinPoolSize,
		ReservePoolSize:      p.ReservePoolSize,
		ReservePoolTimeout:   p.ReservePoolTimeout,
		MaxDBConnections:     p.MaxDBConnections,
		ServerLifetime:       p.ServerLifetime,
		ServerIdleTimeout:    off(p.ServerIdleTimeout),
		ServerConnectTimeout: p.ServerConnectTimeout,
		ServerLoginRetry:     off(p.ServerLoginRetry),
		QueryWaitTimeout:     off(p.QueryWaitTimeout),
		MaxPinnedConnections: p.MaxPinnedConnections,
	}
}

// peers maps the file's peers onto the proxy's, in order, so that an
// error about Peers[i] is one about peers[i].
func peers(ps []config.Peer) []proxy.Peer {
	var out []proxy.Peer
	for _, p := range ps {
		out = append(out, proxy.Peer{ID: p.ID, Addr: p.Addr()})
	}
	return out
}

// newRewriter builds the rewriter for cfg's tables and limits.
func newRewriter(cfg *config.Config) (*rewrite.Rewriter, error) {
	return rewrite.New(cfg.Tables, rewrite.Options{
		MaxStatementBytes:  cfg.Limits.MaxStatementBytes,
		MaxNestingDepth:    cfg.Limits.MaxNestingDepth,
		TrustedFunctions:   cfg.TrustedFunctions,
		BypassRoles:        cfg.BypassRoles,
		RequireRowSecurity: cfg.RowSecurity == config.RowSecurityRequired,
	})
}

// newStack builds every component; nothing listens or connects yet.
func newStack(cfg *config.Config, log *slog.Logger) (*stack, error) {
	rw, err := newRewriter(cfg)
	if err != nil {
		return nil, fmt.Errorf("building rewriter: %w", err)
	}
	s := &stack{cfg: cfg, log: log}
	if keys := cfg.PoolingKeysSet(); cfg.PoolMode != config.PoolModeTransaction && len(keys) > 0 {
		log.Warn("pooling keys take effect in pool_mode transaction only; session mode ignores them", "keys", keys)
	}
	access, err := newAdminAccess(&cfg.Admin)
	if err != nil {
		return nil, err
	}
	s.access.Store(access)
	var tlsConfig *tls.Config
	if cfg.TLS != nil {
		if err := s.loadClientCert(cfg.TLS); err != nil {
			return nil, err
		}
		// The certificate is looked up per handshake, so a reload can
		// rotate it without a restart.
		tlsConfig = &tls.Config{
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.clientCert.Load(), nil },
			MinVersion:     tls.VersionTLS12,
		}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfoCollector(),
	)

	upstreamTLS, err := buildUpstreamTLS(cfg.UpstreamTLS)
	if err != nil {
		return nil, fmt.Errorf("upstream_tls: %w", err)
	}
	s.registry = reg
	s.proxy, err = proxy.New(proxy.Config{
		Upstream:        cfg.Upstream,
		TLSConfig:       tlsConfig,
		UpstreamTLS:     upstreamTLS,
		Rewriter:        rw,
		BypassRoles:     cfg.BypassRoles,
		Logger:          log.With("component", "proxy"),
		Registerer:      reg,
		DialTimeout:     cfg.DialTimeout,
		UpstreamTCP:     upstreamTCP(cfg.UpstreamTCP),
		ShutdownTimeout: cfg.ShutdownTimeout,
		MaxMessageBytes: cfg.Limits.MaxMessageBytes,

		MaxClientConnections:   cfg.Limits.MaxClientConnections,
		ClientLoginTimeout:     cfg.ClientLoginTimeout,
		IdleSessionTimeout:     cfg.IdleSessionTimeout,
		IdleTransactionTimeout: cfg.IdleTransactionTimeout,
		CatalogTTL:             cfg.CatalogTTL,
		DDLEventsDSN:           cfg.DDLEventsLogin(),

		PoolMode: cfg.PoolMode,
		Auth:     proxy.AuthConfig{Type: cfg.Auth.Type, File: cfg.Auth.File, Query: cfg.Auth.Query, DSN: cfg.Auth.DSN},
		Pool:     poolSettings(cfg.Pool),
		PeerID:   cfg.PeerID,
		Peers:    peers(cfg.Peers),
	})
	if err != nil {
		return nil, fmt.Errorf("building proxy: %w", err)
	}
	if s.sweeper, err = s.newSweeper(cfg); err != nil {
		return nil, fmt.Errorf("building sweeper: %w", err)
	}
	s.reloadOK = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ttlproxy_config_last_reload_successful",
		Help: "1 when the last configuration reload (SIGHUP or POST /-/reload) succeeded, 0 when it failed and the previous configuration stays in force.",
	})
	s.reloadOKTime = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ttlproxy_config_last_reload_success_timestamp_seconds",
		Help: "Unix time of the last successful configuration reload (or of the start).",
	})
	s.reloadOK.Set(1)
	s.reloadOKTime.SetToCurrentTime()
	reg.MustRegister(s.reloadOK, s.reloadOKTime)
	s.admin = &http.Server{
		Handler:           s.adminHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// foregroundLatency is the sweeper's foreground pacing signal
// (sweeper.Config.ForegroundLatency): the 99th percentile latency of the
// exchanges the proxy relayed over the last second
// (proxy.Server.ForegroundLatency).
// A sweep without a proxy (ttlproxy sweep) has no signal: 0.
func (s *stack) foregroundLatency() time.Duration {
	if s.proxy == nil {
		return 0
	}
	return s.proxy.ForegroundLatency()
}

// adminHandler serves /metrics, /healthz (the process is up) and /readyz (the
// upstream server accepts TCP connections and no shutdown is under way).
func (s *stack) adminHandler() http.Handler {
	mux := http.NewServeMux()
	// The sweeper's registry appears with the first sweeper.
	gatherers := prometheus.Gatherers{s.registry, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if r := s.sweeperReg.Load(); r != nil {
			return r.Gather()
		}
		return nil, nil
	})}
	mux.HandleFunc("GET /status", s.guard(endpointStatus, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.status())
	}))
	mux.HandleFunc("POST /-/reload", s.guard(endpointLifecycle, func(w http.ResponseWriter, _ *http.Request) {
		if err := s.reload(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "reloaded")
	}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Registry: s.registry,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), readyzTimeout)
		defer cancel()
		if err := s.proxy.CheckUpstream(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// run serves on ln (clients) and adminLn (HTTP) and starts the sweeper. When
// ctx is cancelled it stops accepting, lets the proxy drain (bounded by
// shutdown_timeout), stops the sweeper after its current batch, then closes
// the admin server. It returns nil after a clean shutdown, or the error that
// ended a component early (after shutting the others down).
func (s *stack) run(ctx context.Context, ln, adminLn net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	proxyDone := make(chan error, 1)
	go func() { proxyDone <- s.proxy.Serve(ctx, ln) }()
	s.watchSIGHUP(ctx.Done())
	adminDone := make(chan error, 1)
	webConfig := s.cfg.Admin.WebConfigFile
	go func() {
		// exporter-toolkit serves TLS and basic auth as the web
		// configuration file says, reading it again on every request.
		err := web.Serve(adminLn, s.admin, &web.FlagConfig{WebConfigFile: &webConfig}, s.log.With("component", "admin"))
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		adminDone <- err
	}()
	s.log.Info("admin server listening", "admin_addr", adminLn.Addr().String())
	// The sweeper's own context is not cancelled by the signal: Stop ends it
	// after the batch in flight instead of aborting the batch.
	s.reloadMu.Lock()
	s.sweeperCtx = context.WithoutCancel(ctx)
	sw := s.sweeper
	s.reloadMu.Unlock()
	if sw != nil {
		if err := sw.Start(s.sweeperCtx); err != nil {
			// The sweeper's error comes first; the proxy and the admin server
			// were stopped for it, and an error of theirs is joined to it.
			cancel()
			proxyErr := <-proxyDone
			s.closeAdmin()
			adminErr := <-adminDone
			return errors.Join(fmt.Errorf("starting sweeper: %w", err), proxyErr, adminErr)
		}
	}

	var firstErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down")
	case err := <-proxyDone:
		proxyDone = nil
		firstErr = err
		if err == nil {
			firstErr = errors.New("proxy stopped unexpectedly")
		}
	case err := <-adminDone:
		adminDone = nil
		firstErr = fmt.Errorf("admin server: %w", err)
	}
	s.draining.Store(true)
	cancel()

	var wg sync.WaitGroup
	s.reloadMu.Lock()
	sw = s.sweeper
	s.sweeper = nil // a reload from now on starts none
	s.reloadMu.Unlock()
	if sw != nil {
		wg.Go(sw.Stop)
	}
	if proxyDone != nil {
		if err := <-proxyDone; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	wg.Wait()
	s.closeAdmin()
	if adminDone != nil {
		if err := <-adminDone; err != nil && firstErr == nil {
			firstErr = fmt.Errorf("admin server: %w", err)
		}
	}
	if firstErr == nil {
		s.log.Info("stopped")
	}
	return firstErr
}

func (s *stack) closeAdmin() {
	ctx, cancel := context.WithTimeout(context.Background(), adminShutdownTimeout)
	defer cancel()
	if err := s.admin.Shutdown(ctx); err != nil {
		_ = s.admin.Close()
	}
}

// buildInfoCollector exports ttlproxy_build_info{version,goversion} = 1.
func buildInfoCollector() prometheus.Collector {
	info := readVersion()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        prometheus.BuildFQName("ttlproxy", "", "build_info"),
		Help:        "Always 1; the labels give the version of the running binary.",
		ConstLabels: prometheus.Labels{"version": info.Version, "goversion": info.GoVersion},
	})
	g.Set(1)
	return g
}
