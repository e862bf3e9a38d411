package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestImportPgBouncer(t *testing.T) {
	im, err := ImportPgBouncer("testdata/pgbouncer/pgbouncer.ini", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(im.YAML)
	if err != nil {
		t.Fatalf("the file written does not load: %v\n%s", err, im.YAML)
	}
	dur := func(d time.Duration) *time.Duration { return &d }
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", cfg.Listen, ":6432"},
		{"listen_reuseport", cfg.ListenReusePort, true},
		{"upstream", cfg.Upstream, "db.internal:5433"},
		{"pool_mode", cfg.PoolMode, PoolModeTransaction},
		{"auth_type", cfg.Auth.Type, "scram-sha-256"},
		{"auth_file gives way to auth_query", cfg.Auth.File, ""},
		{"auth_query", cfg.Auth.Query, "SELECT usename, passwd FROM pg_shadow WHERE usename=$1"},
		{"auth_dsn", cfg.Auth.DSN, "host=db.internal port=5433 user=pgbouncer_auth dbname=app"},
		{"max_client_conn", cfg.Limits.MaxClientConnections, 2000},
		{"default_pool_size", cfg.Pool.DefaultPoolSize, 25},
		{"min_pool_size (%include)", cfg.Pool.MinPoolSize, 2},
		{"reserve_pool_size", cfg.Pool.ReservePoolSize, 5},
		{"reserve_pool_timeout", cfg.Pool.ReservePoolTimeout, 2500 * time.Millisecond},
		{"server_lifetime 0 is not carried", cfg.Pool.ServerLifetime, time.Duration(0)},
		{"server_idle_timeout", *cfg.Pool.ServerIdleTimeout, *dur(10 * time.Minute)},
		{"query_wait_timeout 0 disables", *cfg.Pool.QueryWaitTimeout, time.Duration(0)},
		{"client_idle_timeout", cfg.IdleSessionTimeout, time.Hour},
		{"tcp_keepalive", cfg.UpstreamTCP.KeepalivesDisabled, false},
		{"tcp_keepidle", cfg.UpstreamTCP.KeepalivesIdle, 30 * time.Second},
		{"tcp_user_timeout (milliseconds)", cfg.UpstreamTCP.TCPUserTimeout != nil && *cfg.UpstreamTCP.TCPUserTimeout == 45*time.Second, true},
		{"server_tls_sslmode", cfg.UpstreamTLS.SSLMode, "verify-full"},
		{"server_tls_ca_file", cfg.UpstreamTLS.SSLRootCert, "/etc/ssl/certs/db-ca.pem"},
		{"peer_id", cfg.PeerID, 1},
		{"peers", len(cfg.Peers), 2},
		{"no tables yet", len(cfg.Tables), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if len(cfg.Peers) == 2 && (cfg.Peers[1].Host != "pgb-2.internal" || cfg.Peers[1].Port != 6433 || cfg.Peers[0].Port != 6432) {
		t.Errorf("peers %+v", cfg.Peers)
	}

	// Every setting not carried over is listed, with why, in the file too.
	want := map[string]string{
		"logfile":                 "stderr",
		"pidfile":                 "pid file",
		"unix_socket_dir":         "TCP only",
		"admin_users":             "console",
		"server_lifetime":         "0 has no equivalent",
		"server_reset_query":      "resets a server connection completely",
		"reports":                 "does not rename databases",
		"batch":                   "per-user",
		"max_prepared_statements": "prepared statements",
		"pool_mode_typo":          "not a PgBouncer setting",
		"auth_file":               "auth_query alone",
	}
	for _, s := range im.Skipped {
		if frag, ok := want[s.Key]; ok {
			if !strings.Contains(s.Why, frag) {
				t.Errorf("%s: why %q, want it to say %q", s, s.Why, frag)
			}
			if !strings.Contains(string(im.YAML), "] "+s.Key+" = ") {
				t.Errorf("%s is not listed in the file written", s.Key)
			}
			delete(want, s.Key)
		}
	}
	for k := range want {
		t.Errorf("%s: not listed as skipped: %v", k, im.Skipped)
	}
	if strings.Contains(string(im.YAML), "pool_size=5") && !strings.Contains(string(im.YAML), "pool_size per database") {
		t.Error("the per-database pool_size is not explained")
	}
}

func TestImportPgBouncerMinimal(t *testing.T) {
	im, err := ImportPgBouncer("testdata/pgbouncer-minimal.ini", "/etc/ttlproxy/userlist.txt")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(im.YAML)
	if err != nil {
		t.Fatalf("%v\n%s", err, im.YAML)
	}
	if cfg.Listen != "0.0.0.0:6543" || cfg.Upstream != "postgres:5432" || cfg.PoolMode != PoolModeSession || cfg.Auth.File != "/etc/ttlproxy/userlist.txt" {
		t.Errorf("listen %q upstream %q pool_mode %q auth_file %q", cfg.Listen, cfg.Upstream, cfg.PoolMode, cfg.Auth.File)
	}
	var keys []string
	for _, s := range im.Skipped {
		keys = append(keys, s.Key)
	}
	if got := strings.Join(keys, ","); got != "user,auth_type,ignore_startup_parameters" {
		t.Errorf("skipped %s", got)
	}
}

func TestImportPgBouncerErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, ini, want string }{
		{"no databases", "[pgbouncer]\nlisten_port = 6432\n", "no [databases] entry"},
		{"key before a section", "listen_port = 6432\n", "before any [section]"},
		{"not key = value", "[pgbouncer]\nlisten_port\n", "want key = value"},
		{"missing include", "[pgbouncer]\n%include nowhere.ini\n", "nowhere.ini"},
		{"include loop", "[pgbouncer]\n%include loop.ini\n", "nested too deep"},
	} {
		path := filepath.Join(dir, "loop.ini")
		if err := os.WriteFile(path, []byte(c.ini), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ImportPgBouncer(path, "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestParseConnString(t *testing.T) {
	kv, err := parseConnString(`host=db port = 5433 dbname='my db' password='it\'s' user=a\ b`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"host": "db", "port": "5433", "dbname": "my db", "password": "it's", "user": "a b"}
	for k, v := range want {
		if kv[k] != v {
			t.Errorf("%s = %q, want %q", k, kv[k], v)
		}
	}
	if _, err := parseConnString("host='db"); err == nil {
		t.Error("unterminated quote accepted")
	}
}

// FuzzImportPgBouncer: any file is either refused with an error or
// translated into a file Parse accepts (ImportPgBouncer checks it), never a
// panic.
func FuzzImportPgBouncer(f *testing.F) {
	for _, p := range []string{"testdata/pgbouncer/pgbouncer.ini", "testdata/pgbouncer-minimal.ini"} {
		b, err := os.ReadFile(p) //nolint:gosec // the package's own test data
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add("[databases]\nx = host='a b' port=1,2\n[pgbouncer]\nlisten_addr = *,::1\nserver_lifetime = 1e400\nauth_query = \"a: b # c\"\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, ini string) {
		path := filepath.Join(dir, "fuzz.ini")
		if err := os.WriteFile(path, []byte(ini), 0o600); err != nil {
			t.Fatal(err)
		}
		im, err := ImportPgBouncer(path, "")
		if err != nil {
			return
		}
		if _, err := Parse(im.YAML); err != nil {
			t.Fatalf("%v\n%s", err, im.YAML)
		}
	})
}
