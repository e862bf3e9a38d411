package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/sweeper"
)

// Live reload: SIGHUP or POST /-/reload rereads the configuration file.
// The tables and their rules, bypass_roles, trusted_functions, the
// statement and client limits and the timeouts of clients change for every
// session's next statement (proxy.Server.Reload); the sweeper is stopped
// after its batch in flight and started again with the new tables and
// settings. The admin section (but for web_config_file, which
// exporter-toolkit rereads per request anyway) and the client certificate
// and key files of tls are read again. The other keys (listen,
// admin_listen, upstream, turning tls on or off, upstream_tls,
// dial_timeout, shutdown_timeout, pool_mode and the auth_* and pool keys of
// transaction mode) need a restart: a reload
// that changes them says so in the log and keeps them. A file that does not
// load keeps the running configuration, logs the error (which names the
// key) and sets ttlproxy_config_last_reload_successful to 0.

// restartKeys returns the keys whose change a reload cannot apply.
func restartKeys(old, cur *config.Config) []string {
	var keys []string
	for _, k := range []struct {
		key      string
		old, cur any
	}{
		{"listen", old.Listen, cur.Listen},
		{"admin_listen", old.AdminListen, cur.AdminListen},
		{"upstream", old.Upstream, cur.Upstream},
		// The certificate files are read again; switching TLS on or off
		// needs a restart.
		{"tls", old.TLS == nil, cur.TLS == nil},
		{"admin.web_config_file", old.Admin.WebConfigFile, cur.Admin.WebConfigFile},
		{"upstream_tls", old.UpstreamTLS, cur.UpstreamTLS},
		{"dial_timeout", old.DialTimeout, cur.DialTimeout},
		{"upstream_tcp", old.UpstreamTCP, cur.UpstreamTCP},
		{"shutdown_timeout", old.ShutdownTimeout, cur.ShutdownTimeout},
		{"catalog_ttl", old.CatalogTTL, cur.CatalogTTL},
		{"gomaxprocs", old.GOMAXPROCS, cur.GOMAXPROCS},
		{"ddl_events_dsn", old.DDLEventsDSN, cur.DDLEventsDSN},
		// The proxy builds its client authentication and pools once, in
		// proxy.New; proxy.Reload does not take them.
		{"pool_mode", old.PoolMode, cur.PoolMode},
		{"auth_type", old.Auth.Type, cur.Auth.Type},
		{"auth_file", old.Auth.File, cur.Auth.File},
		{"auth_query", old.Auth.Query, cur.Auth.Query},
		{"auth_dsn", old.Auth.DSN, cur.Auth.DSN},
		{"default_pool_size", old.Pool.DefaultPoolSize, cur.Pool.DefaultPoolSize},
		{"min_pool_size", old.Pool.MinPoolSize, cur.Pool.MinPoolSize},
		{"reserve_pool_size", old.Pool.ReservePoolSize, cur.Pool.ReservePoolSize},
		{"reserve_pool_timeout", old.Pool.ReservePoolTimeout, cur.Pool.ReservePoolTimeout},
		{"max_db_connections", old.Pool.MaxDBConnections, cur.Pool.MaxDBConnections},
		{"server_lifetime", old.Pool.ServerLifetime, cur.Pool.ServerLifetime},
		{"server_idle_timeout", old.Pool.ServerIdleTimeout, cur.Pool.ServerIdleTimeout},
		{"server_connect_timeout", old.Pool.ServerConnectTimeout, cur.Pool.ServerConnectTimeout},
		{"server_login_retry", old.Pool.ServerLoginRetry, cur.Pool.ServerLoginRetry},
		{"query_wait_timeout", old.Pool.QueryWaitTimeout, cur.Pool.QueryWaitTimeout},
		{"max_pinned_connections", old.Pool.MaxPinnedConnections, cur.Pool.MaxPinnedConnections},
		// The cancel keys carry peer_id from proxy.New on.
		{"peer_id", old.PeerID, cur.PeerID},
		{"peers", old.Peers, cur.Peers},
	} {
		if !reflect.DeepEqual(k.old, k.cur) {
			keys = append(keys, k.key)
		}
	}
	return keys
}

// reload rereads the configuration and applies what can change at runtime.
func (s *stack) reload() (err error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	defer func() {
		if err != nil {
			s.reloadOK.Set(0)
			s.log.Error("configuration reload failed; the running configuration stays", "err", err)
			return
		}
		s.reloadOK.Set(1)
		s.reloadOKTime.SetToCurrentTime()
	}()
	if s.reloadFrom == nil {
		return errors.New("no configuration file to reload")
	}
	cfg, err := s.reloadFrom()
	if err != nil {
		return err
	}
	if keys := restartKeys(s.cfg, cfg); len(keys) > 0 {
		s.log.Warn("configuration keys changed that take effect only after a restart", "keys", keys)
		cfg.Listen, cfg.AdminListen, cfg.Upstream = s.cfg.Listen, s.cfg.AdminListen, s.cfg.Upstream
		if (cfg.TLS == nil) != (s.cfg.TLS == nil) {
			cfg.TLS = s.cfg.TLS
		}
		cfg.UpstreamTLS, cfg.UpstreamTCP = s.cfg.UpstreamTLS, s.cfg.UpstreamTCP
		cfg.Admin.WebConfigFile = s.cfg.Admin.WebConfigFile
		cfg.DialTimeout, cfg.ShutdownTimeout, cfg.CatalogTTL = s.cfg.DialTimeout, s.cfg.ShutdownTimeout, s.cfg.CatalogTTL
		cfg.GOMAXPROCS = s.cfg.GOMAXPROCS
		cfg.DDLEventsDSN = s.cfg.DDLEventsDSN
		cfg.PoolMode, cfg.Auth, cfg.Pool = s.cfg.PoolMode, s.cfg.Auth, s.cfg.Pool
		cfg.PeerID, cfg.Peers = s.cfg.PeerID, s.cfg.Peers
	}
	rw, err := newRewriter(cfg)
	if err != nil {
		return fmt.Errorf("building rewriter: %w", err)
	}
	access, err := newAdminAccess(&cfg.Admin)
	if err != nil {
		return err
	}
	if cfg.TLS != nil {
		// A rotated certificate serves the next handshake.
		if err := s.loadClientCert(cfg.TLS); err != nil {
			return err
		}
	}
	s.access.Store(access)
	if err := s.proxy.Reload(proxy.Reload{
		Rewriter:               rw,
		BypassRoles:            cfg.BypassRoles,
		MaxMessageBytes:        cfg.Limits.MaxMessageBytes,
		MaxClientConnections:   cfg.Limits.MaxClientConnections,
		ClientLoginTimeout:     cfg.ClientLoginTimeout,
		IdleSessionTimeout:     cfg.IdleSessionTimeout,
		IdleTransactionTimeout: cfg.IdleTransactionTimeout,
	}); err != nil {
		return err
	}
	if !reflect.DeepEqual(s.cfg.Sweeper, cfg.Sweeper) || !reflect.DeepEqual(s.cfg.Tables, cfg.Tables) {
		if err := s.restartSweeper(cfg); err != nil {
			// The proxy runs the new rules already; the sweeper is off
			// until the next successful reload.
			s.cfg = cfg
			return fmt.Errorf("sweeper: %w", err)
		}
	}
	s.cfg = cfg
	s.log.Info("configuration reloaded", "tables", len(cfg.Tables), "sweeper", s.sweeper != nil)
	return nil
}

// restartSweeper stops the running sweeper (after its batch in flight) and
// starts one for cfg. Called with reloadMu held.
func (s *stack) restartSweeper(cfg *config.Config) error {
	if s.sweeper != nil {
		s.sweeper.Stop()
		s.sweeper = nil
	}
	if s.sweeperCtx == nil {
		return errors.New("the stack is not running")
	}
	sw, err := s.newSweeper(cfg)
	if err != nil || sw == nil {
		return err
	}
	if err := sw.Start(s.sweeperCtx); err != nil {
		return err
	}
	s.sweeper = sw
	return nil
}

// newSweeper builds the sweeper of cfg; nil without a sweeper section or
// tables. Every sweeper of the stack reports to the same collectors, in a
// registry of their own made with the first: a reload that replaces the
// sweeper keeps its counters and the time of its last run.
func (s *stack) newSweeper(cfg *config.Config) (*sweeper.Sweeper, error) {
	sc := cfg.Sweeper
	if sc == nil {
		return nil, nil
	}
	if len(cfg.Tables) == 0 {
		s.log.Warn("sweeper section present but no tables configured: not sweeping")
		return nil, nil
	}
	if s.sweeperMetrics == nil {
		reg := prometheus.NewRegistry()
		m, err := sweeper.NewMetrics(reg)
		if err != nil {
			return nil, err
		}
		s.sweeperMetrics = m
		s.sweeperReg.Store(reg)
	}
	swc := sweeper.DefaultConfig()
	swc.DSN, swc.Rules = sc.DSN, cfg.Tables
	swc.DialFunc = upstreamTCP(cfg.UpstreamTCP).DialFunc()
	swc.Logger, swc.Metrics = s.log.With("component", "sweeper"), s.sweeperMetrics
	if sc.Interval > 0 {
		swc.Interval = sc.Interval
	}
	if sc.BatchSize > 0 {
		swc.BatchSize = sc.BatchSize
	}
	if sc.BatchPause != nil {
		swc.BatchPause = *sc.BatchPause
	}
	if sc.BatchTimeout > 0 {
		swc.BatchTimeout = sc.BatchTimeout
	}
	if sc.TargetBatchDuration != nil {
		swc.TargetBatchDuration = *sc.TargetBatchDuration
	}
	if sc.MaxBatchSize > 0 {
		swc.MaxBatchSize = sc.MaxBatchSize
	}
	if sc.Workers > 0 {
		swc.Workers = sc.Workers
	}
	swc.MinRowsPerSecond = float64(sc.MinRowsPerSecond)
	swc.DropExpiredPartitions = sc.DropExpiredPartitions
	swc.CDCOrigin = sc.CDCOrigin
	swc.ForegroundLatency = s.foregroundLatency
	return sweeper.New(swc)
}

// watchSIGHUP reloads on SIGHUP until done is closed.
func (s *stack) watchSIGHUP(done <-chan struct{}) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-hup:
				s.log.Info("SIGHUP: reloading the configuration")
				_ = s.reload()
			case <-done:
				return
			}
		}
	}()
}
