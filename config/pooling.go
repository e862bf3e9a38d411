package config

import (
	"errors"
	"fmt"
	"time"
)

// Pool modes (pool_mode), as proxy.PoolModeSession and
// proxy.PoolModeTransaction.
const (
	PoolModeSession     = "session"
	PoolModeTransaction = "transaction"
)

// Auth is how the proxy authenticates clients in pool_mode transaction,
// with PgBouncer's keys; session mode passes clients' logins through to
// the server and ignores it.
type Auth struct {
	// Type is auth_type: scram-sha-256, md5, plain or trust; "":
	// scram-sha-256.
	Type string
	// File is auth_file, a userlist.txt as PgBouncer's.
	File string
	// Query is auth_query, run on DSN; "": proxy.DefaultAuthQuery (the
	// function `ttlproxy install --auth-query` creates).
	Query string
	// DSN is auth_dsn, the login that runs Query; it may hold a password,
	// so it is never logged.
	DSN string
}

// Pool bounds the pools of pool_mode transaction, with PgBouncer's keys;
// session mode ignores it. A zero field is the key left out, which
// proxy.PoolSettings reads as its default; the pointers tell a key left
// out (nil) from 0s, which disables what PgBouncer's 0 disables.
type Pool struct {
	// DefaultPoolSize is default_pool_size; 0: proxy.DefaultPoolSize.
	DefaultPoolSize int
	// MaxPinnedConnections is max_pinned_connections, positive; 0: half
	// of default_pool_size, at least 1 (the proxy's default).
	MaxPinnedConnections int
	// MinPoolSize, ReservePoolSize and MaxDBConnections are
	// min_pool_size, reserve_pool_size and max_db_connections (0: none,
	// none, no limit).
	MinPoolSize, ReservePoolSize, MaxDBConnections int
	// ReservePoolTimeout, ServerLifetime and ServerConnectTimeout are
	// reserve_pool_timeout, server_lifetime and server_connect_timeout,
	// positive; 0: the proxy's defaults.
	ReservePoolTimeout, ServerLifetime, ServerConnectTimeout time.Duration
	// ServerIdleTimeout, ServerLoginRetry and QueryWaitTimeout are
	// server_idle_timeout, server_login_retry and query_wait_timeout; nil:
	// the proxy's defaults; 0: disabled (never, no pause, no bound).
	ServerIdleTimeout, ServerLoginRetry, QueryWaitTimeout *time.Duration
}

// parsePooling reads the pooling keys of the top level.
func parsePooling(f fields, cfg *Config) error {
	cfg.PoolMode = PoolModeSession
	if v, ok := f["pool_mode"]; ok {
		s, err := v.str()
		if err != nil {
			return err
		}
		if s != PoolModeSession && s != PoolModeTransaction {
			return fmt.Errorf("%s: %q is not one of %s, %s", v.path, s, PoolModeSession, PoolModeTransaction)
		}
		cfg.PoolMode = s
	}
	a := &cfg.Auth
	for _, k := range []struct {
		key string
		dst *string
	}{{"auth_type", &a.Type}, {"auth_file", &a.File}, {"auth_query", &a.Query}, {"auth_dsn", &a.DSN}} {
		if v, ok := f[k.key]; ok {
			s, err := v.str()
			if err != nil {
				return err
			}
			*k.dst = s
		}
	}
	switch a.Type {
	case "", "scram-sha-256", "md5", "plain", "trust":
	default:
		return fmt.Errorf("auth_type: %q is not one of scram-sha-256, md5, plain, trust", a.Type)
	}
	switch {
	case a.File != "" && a.DSN != "":
		return errors.New("auth_file, auth_dsn: set one of them, not both")
	case a.Query != "" && a.DSN == "":
		return errors.New("auth_query: needs auth_dsn, the login that runs it")
	case cfg.PoolMode == PoolModeTransaction && a.File == "" && a.DSN == "" && a.Type != "trust":
		return errors.New("auth_file: pool_mode transaction needs auth_file or auth_dsn, unless auth_type is trust")
	}

	p := &cfg.Pool
	if v, ok := f["default_pool_size"]; ok {
		n, err := v.positiveInt()
		if err != nil {
			return err
		}
		p.DefaultPoolSize = n
	}
	if v, ok := f["max_pinned_connections"]; ok {
		n, err := v.positiveInt()
		if err != nil {
			return err
		}
		p.MaxPinnedConnections = n
	}
	for _, k := range []struct {
		key string
		dst *int
	}{{"min_pool_size", &p.MinPoolSize}, {"reserve_pool_size", &p.ReservePoolSize}, {"max_db_connections", &p.MaxDBConnections}} {
		if v, ok := f[k.key]; ok {
			n, err := v.nonNegativeInt()
			if err != nil {
				return err
			}
			*k.dst = n
		}
	}
	// proxy.DefaultPoolSize, which config does not import.
	if size := orDefault(p.DefaultPoolSize, 20); p.MinPoolSize > size {
		return fmt.Errorf("min_pool_size: %d is larger than default_pool_size (%d)", p.MinPoolSize, size)
	}
	for _, k := range []struct {
		key string
		dst *time.Duration
	}{{"reserve_pool_timeout", &p.ReservePoolTimeout}, {"server_connect_timeout", &p.ServerConnectTimeout}} {
		if v, ok := f[k.key]; ok {
			d, err := v.positiveDuration()
			if err != nil {
				return err
			}
			*k.dst = d
		}
	}
	if v, ok := f["server_lifetime"]; ok {
		d, err := v.duration()
		if err != nil {
			return err
		}
		if d == 0 {
			// PgBouncer's 0 uses a server connection once; the pool
			// has no such mode, and reading 0 as "no limit" would do
			// the opposite of what a PgBouncer configuration meant.
			return fmt.Errorf("%s: must be positive (PgBouncer's 0, one use per server connection, is not supported)", v.path)
		}
		p.ServerLifetime = d
	}
	for _, k := range []struct {
		key string
		dst **time.Duration
	}{{"server_idle_timeout", &p.ServerIdleTimeout}, {"server_login_retry", &p.ServerLoginRetry}, {"query_wait_timeout", &p.QueryWaitTimeout}} {
		if v, ok := f[k.key]; ok {
			d, err := v.duration()
			if err != nil {
				return err
			}
			*k.dst = &d
		}
	}
	return nil
}

// orDefault returns v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// PoolingKeysSet returns the pooling keys other than pool_mode that the
// file sets, in the order of the manual: they take effect in pool_mode
// transaction only, so that a caller in session mode can say so.
func (c *Config) PoolingKeysSet() []string {
	var keys []string
	for _, k := range []struct {
		key string
		set bool
	}{
		{"auth_type", c.Auth.Type != ""},
		{"auth_file", c.Auth.File != ""},
		{"auth_query", c.Auth.Query != ""},
		{"auth_dsn", c.Auth.DSN != ""},
		{"default_pool_size", c.Pool.DefaultPoolSize != 0},
		{"min_pool_size", c.Pool.MinPoolSize != 0},
		{"reserve_pool_size", c.Pool.ReservePoolSize != 0},
		{"reserve_pool_timeout", c.Pool.ReservePoolTimeout != 0},
		{"max_db_connections", c.Pool.MaxDBConnections != 0},
		{"server_lifetime", c.Pool.ServerLifetime != 0},
		{"server_idle_timeout", c.Pool.ServerIdleTimeout != nil},
		{"server_connect_timeout", c.Pool.ServerConnectTimeout != 0},
		{"server_login_retry", c.Pool.ServerLoginRetry != nil},
		{"query_wait_timeout", c.Pool.QueryWaitTimeout != nil},
		{"max_pinned_connections", c.Pool.MaxPinnedConnections != 0},
		{"peer_id", c.PeerID != 0},
		{"peers", len(c.Peers) > 0},
	} {
		if k.set {
			keys = append(keys, k.key)
		}
	}
	return keys
}
