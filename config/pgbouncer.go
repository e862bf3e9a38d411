package config

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// PgBouncerImport is a PgBouncer configuration translated into a ttlproxy
// configuration file (`ttlproxy import-pgbouncer`).
type PgBouncerImport struct {
	// YAML is the configuration file: every setting ttlproxy understands
	// under its own key, an empty `tables` list to fill, and the settings
	// not carried over as a comment at its end. Parse accepts it.
	YAML []byte
	// Skipped are the settings not carried over, in the order read.
	Skipped []PgBouncerSetting
}

// PgBouncerSetting is one setting of a PgBouncer file that was not carried
// over, and why.
type PgBouncerSetting struct {
	File    string // the file it was read from
	Line    int    // its line, from 1
	Section string // databases, users, peers or pgbouncer
	Key     string
	Value   string
	Why     string
}

func (s PgBouncerSetting) String() string {
	return fmt.Sprintf("%s:%d: [%s] %s = %s: %s", s.File, s.Line, s.Section, s.Key, s.Value, s.Why)
}

// ImportPgBouncer reads the PgBouncer configuration at path (pgbouncer.ini,
// with its %include files, relative to the including file's directory)
// and translates it. userlist, when not "", is the auth_file to use instead
// of the one the file names. Errors are the file's I/O and syntax errors;
// settings that cannot be carried over are listed in Skipped, not errors.
//
// The keys follow PgBouncer's configuration reference
// (https://www.pgbouncer.org/config.html): times are seconds (a decimal
// number), but tcp_user_timeout, which is milliseconds; booleans are 0 or
// 1; a [databases] entry is a libpq-style list of key=value pairs.
func ImportPgBouncer(path, userlist string) (*PgBouncerImport, error) {
	var lines []iniLine
	if err := readINI(path, 0, &lines); err != nil {
		return nil, err
	}
	im := &pgbImporter{values: map[string]any{}, listenPort: "6432"}
	for _, l := range lines {
		im.line(l)
	}
	if userlist != "" {
		im.authFile = &iniLine{file: "(command line)", section: "pgbouncer", key: "auth_file", value: userlist}
	}
	return im.finish()
}

// iniLine is one key = value line of a PgBouncer file.
type iniLine struct {
	file       string
	num        int
	section    string
	key, value string
}

// readINI appends the key = value lines of the file at path, following
// %include (nested at most 10 deep, as a loop guard).
func readINI(path string, depth int, out *[]iniLine) error {
	if depth > 10 {
		return fmt.Errorf("%s: %%include nested too deep", path)
	}
	data, err := os.ReadFile(path) //nolint:gosec // the file the operator names, and its %include files
	if err != nil {
		return err
	}
	if !utf8.Valid(data) {
		return fmt.Errorf("%s: not UTF-8 text", path)
	}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		s := strings.TrimSpace(sc.Text())
		switch {
		case s == "" || s[0] == ';' || s[0] == '#':
		case strings.HasPrefix(s, "%include"):
			inc := strings.TrimSpace(strings.TrimPrefix(s, "%include"))
			if !filepath.IsAbs(inc) {
				inc = filepath.Join(filepath.Dir(path), inc)
			}
			if err := readINI(inc, depth+1, out); err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return fmt.Errorf("%s:%d: unterminated section name %q", path, n, s)
			}
			section = strings.ToLower(strings.TrimSpace(s[1:end]))
		default:
			eq := strings.IndexByte(s, '=')
			if eq < 0 {
				return fmt.Errorf("%s:%d: want key = value: %q", path, n, s)
			}
			if section == "" {
				return fmt.Errorf("%s:%d: %q before any [section]", path, n, s)
			}
			key := strings.TrimSpace(s[:eq])
			if section == "pgbouncer" {
				key = strings.ToLower(key)
			}
			*out = append(*out, iniLine{file: path, num: n, section: section, key: key, value: unquoteINI(strings.TrimSpace(s[eq+1:]))})
		}
	}
	return sc.Err()
}

// unquoteINI removes the double quotes around a whole value, as PgBouncer
// reads "…" values.
func unquoteINI(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return strings.ReplaceAll(v[1:len(v)-1], `""`, `"`)
	}
	return v
}

// pgbImporter gathers the translated settings.
type pgbImporter struct {
	values     map[string]any // ttlproxy key path → value
	skipped    []PgBouncerSetting
	listenAddr string
	listenPort string
	upstreams  []string // host:port of the [databases] entries, first first
	authUser   string
	authFile   *iniLine // auth_file's line
	authDB     string
	firstDB    string
	peers      []pgbPeer
}

func (im *pgbImporter) set(key string, v any) { im.values[key] = v }

func (im *pgbImporter) skip(l iniLine, why string) {
	im.skipped = append(im.skipped, PgBouncerSetting{File: l.file, Line: l.num, Section: l.section, Key: l.key, Value: l.value, Why: why})
}

// Reasons shared by several settings.
const (
	whyLogs      = "ttlproxy logs to stderr (log/slog) and exports its statistics at admin_listen's /metrics"
	whyPerPool   = "per-database and per-user pool settings are not supported: the [pgbouncer] value applies to every pool"
	whyTCPOnly   = "ttlproxy listens on TCP only"
	whyTLSFixed  = "ttlproxy's TLS is TLS 1.2 or later with Go's default cipher suites"
	whyNoConsole = "ttlproxy has no admin console database: use admin_listen's /status and /metrics"
	whyResolver  = "the host name is resolved by the system resolver at each dial"
	whyInternal  = "an internal buffer or socket setting of PgBouncer's, with no equivalent"
)

// pgbDirect maps [pgbouncer] settings that keep their meaning to ttlproxy
// keys, with the value's kind.
var pgbDirect = map[string]struct {
	to   string
	kind byte // i: integer, s: string, d: seconds, m: milliseconds, b: 0/1, z: seconds, 0 meaning the default in ttlproxy
}{
	"default_pool_size":        {"default_pool_size", 'i'},
	"min_pool_size":            {"min_pool_size", 'i'},
	"reserve_pool_size":        {"reserve_pool_size", 'i'},
	"max_db_connections":       {"max_db_connections", 'i'},
	"max_client_conn":          {"limits.max_client_connections", 'i'},
	"max_packet_size":          {"limits.max_message_bytes", 'i'},
	"reserve_pool_timeout":     {"reserve_pool_timeout", 'z'},
	"server_lifetime":          {"server_lifetime", 'z'},
	"server_connect_timeout":   {"server_connect_timeout", 'z'},
	"client_login_timeout":     {"client_login_timeout", 'z'},
	"server_idle_timeout":      {"server_idle_timeout", 'd'},
	"server_login_retry":       {"server_login_retry", 'd'},
	"query_wait_timeout":       {"query_wait_timeout", 'd'},
	"idle_transaction_timeout": {"idle_transaction_timeout", 'd'},
	"client_idle_timeout":      {"idle_session_timeout", 'd'},
	"auth_query":               {"auth_query", 's'},
	"peer_id":                  {"peer_id", 'i'},
	"so_reuseport":             {"listen_reuseport", 'b'},
	"tcp_keepalive":            {"upstream_tcp.keepalives", 'b'},
	"tcp_keepidle":             {"upstream_tcp.keepalives_idle", 'd'},
	"tcp_keepintvl":            {"upstream_tcp.keepalives_interval", 'd'},
	"tcp_keepcnt":              {"upstream_tcp.keepalives_count", 'i'},
	"tcp_user_timeout":         {"upstream_tcp.tcp_user_timeout", 'm'},
	"client_tls_cert_file":     {"tls.cert_file", 's'},
	"client_tls_key_file":      {"tls.key_file", 's'},
	"server_tls_ca_file":       {"upstream_tls.sslrootcert", 's'},
	"server_tls_cert_file":     {"upstream_tls.sslcert", 's'},
	"server_tls_key_file":      {"upstream_tls.sslkey", 's'},
}

// pgbSkipped are the [pgbouncer] settings that have no ttlproxy key, and
// why.
var pgbSkipped = map[string]string{
	"logfile": whyLogs, "syslog": whyLogs, "syslog_ident": whyLogs, "syslog_facility": whyLogs,
	"log_connections": whyLogs, "log_disconnections": whyLogs, "log_pooler_errors": whyLogs, "log_stats": whyLogs,
	"stats_period": whyLogs, "verbose": whyLogs,
	"pidfile":         "ttlproxy writes no pid file: run it under a service manager",
	"user":            "run ttlproxy as that user (the container image runs as a fixed non-root uid)",
	"unix_socket_dir": whyTCPOnly, "unix_socket_mode": whyTCPOnly, "unix_socket_group": whyTCPOnly,
	"admin_users": whyNoConsole, "stats_users": whyNoConsole,
	"server_reset_query":        "ttlproxy resets a server connection completely (DISCARD ALL's parts) before it serves another client",
	"server_reset_query_always": "ttlproxy resets a server connection completely (DISCARD ALL's parts) before it serves another client",
	"server_check_query":        "ttlproxy checks an idle server connection's socket before it gives it to a client",
	"server_check_delay":        "ttlproxy checks an idle server connection's socket before it gives it to a client",
	"server_round_robin":        "ttlproxy reuses the most recently released server connection (PgBouncer's default)",
	"server_fast_close":         "not supported",
	"ignore_startup_parameters": "ttlproxy carries every startup parameter to the server",
	"track_extra_parameters":    "ttlproxy carries every startup parameter and setting with its client",
	"application_name_add_host": "not supported",
	"max_prepared_statements":   "ttlproxy tracks every client's prepared statements and prepares them on each server connection it uses",
	"max_user_connections":      whyPerPool, "max_db_client_connections": whyPerPool, "max_user_client_connections": whyPerPool,
	"query_timeout": "not supported: use the server's statement_timeout", "transaction_timeout": "not supported: use the server's transaction_timeout",
	"cancel_wait_timeout": "not supported", "suspend_timeout": "ttlproxy has no online restart (SHOW FDS): use listen_reuseport for rolling restarts",
	"autodb_idle_timeout": "ttlproxy has no automatically created databases: every database goes to upstream",
	"dns_max_ttl":         whyResolver, "dns_nxdomain_ttl": whyResolver, "dns_zone_check_period": whyResolver, "resolv_conf": whyResolver,
	"listen_backlog": whyInternal, "pkt_buf": whyInternal, "sbuf_loopcnt": whyInternal, "tcp_defer_accept": whyInternal,
	"tcp_socket_buffer": whyInternal, "disable_pqexec": "not supported",
	"client_tls_ca_file":   "client certificates are not supported",
	"client_tls_protocols": whyTLSFixed, "client_tls_ciphers": whyTLSFixed, "client_tls_ecdhcurve": whyTLSFixed,
	"client_tls_dheparams": whyTLSFixed, "server_tls_protocols": whyTLSFixed, "server_tls_ciphers": whyTLSFixed,
	"auth_hba_file": "not supported: the server's pg_hba.conf decides in session mode", "auth_ident_file": "not supported",
	"conffile": "informational", "service_name": "ttlproxy runs under a service manager", "job_name": "ttlproxy runs under a service manager",
}

func (im *pgbImporter) line(l iniLine) {
	switch l.section {
	case "pgbouncer":
		im.setting(l)
	case "databases":
		im.database(l)
	case "peers":
		im.peer(l)
	case "users":
		im.skip(l, whyPerPool)
	default:
		im.skip(l, "not a section of PgBouncer's configuration")
	}
}

// setting translates one [pgbouncer] setting.
func (im *pgbImporter) setting(l iniLine) {
	if why, ok := pgbSkipped[l.key]; ok {
		im.skip(l, why)
		return
	}
	if d, ok := pgbDirect[l.key]; ok {
		v, why := convertPgBouncer(l.value, d.kind)
		if why != "" {
			im.skip(l, why)
			return
		}
		im.set(d.to, v)
		return
	}
	switch l.key {
	case "listen_addr":
		addrs := strings.Split(l.value, ",")
		im.listenAddr = strings.TrimSpace(addrs[0])
		if len(addrs) > 1 {
			im.skip(l, "ttlproxy listens on one address: "+im.listenAddr+" is kept")
		}
	case "listen_port":
		if _, err := strconv.ParseUint(l.value, 10, 16); err != nil {
			im.skip(l, "not a port number")
			return
		}
		im.listenPort = l.value
	case "pool_mode":
		switch l.value {
		case PoolModeSession, PoolModeTransaction:
			im.set("pool_mode", l.value)
		default:
			im.skip(l, "ttlproxy pools by session or by transaction, not by statement")
		}
	case "auth_type":
		switch l.value {
		case "scram-sha-256", "md5", "plain", "trust":
			im.set("auth_type", l.value)
		default:
			im.skip(l, "ttlproxy's auth_type is scram-sha-256, md5, plain or trust")
		}
	case "auth_file":
		im.authFile = &l
	case "auth_user":
		im.authUser = l.value
	case "auth_dbname":
		im.authDB = l.value
	case "client_tls_sslmode":
		switch l.value {
		case "disable":
		case "allow", "prefer":
			// TLS offered when tls.cert_file is set.
		default:
			im.skip(l, "ttlproxy offers TLS (tls.cert_file) but does not require it of clients nor check their certificates")
		}
	case "server_tls_sslmode":
		switch l.value {
		case "disable", "prefer", "require", "verify-ca", "verify-full":
			im.set("upstream_tls.sslmode", l.value)
		case "allow":
			im.set("upstream_tls.sslmode", "prefer")
			im.skip(l, "ttlproxy has no sslmode allow: prefer is used")
		default:
			im.skip(l, "not an sslmode")
		}
	default:
		im.skip(l, "not a PgBouncer setting ttlproxy knows")
	}
}

// convertPgBouncer converts a value of kind (pgbDirect) to a ttlproxy
// value, or says why it cannot.
func convertPgBouncer(v string, kind byte) (any, string) {
	switch kind {
	case 's':
		return v, ""
	case 'i':
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, "not a whole number"
		}
		return n, ""
	case 'b':
		switch v {
		case "0":
			return false, ""
		case "1":
			return true, ""
		}
		return nil, "not 0 or 1"
	case 'd', 'z', 'm':
		unit := time.Second
		if kind == 'm' {
			unit = time.Millisecond
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			d, err := ParseDuration(v)
			if err != nil {
				return nil, "not a number of seconds"
			}
			f = float64(d) / float64(unit)
		}
		if f == 0 && kind == 'z' {
			return nil, "0 has no equivalent: ttlproxy reads 0 as its default"
		}
		return formatDuration(time.Duration(f * float64(unit))), ""
	}
	panic("config: unknown PgBouncer value kind")
}

// formatDuration writes d in the largest unit that keeps it whole: 1h,
// 90s, 2500ms.
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return d.String()
}

// database reads one [databases] entry: its host and port become upstream.
func (im *pgbImporter) database(l iniLine) {
	kv, err := parseConnString(l.value)
	if err != nil {
		im.skip(l, err.Error())
		return
	}
	host, port := kv["host"], kv["port"]
	if port == "" {
		port = "5432"
	}
	var notes []string
	if host == "" {
		host = "127.0.0.1"
		notes = append(notes, "no host: PgBouncer uses a Unix socket, ttlproxy connects over TCP to 127.0.0.1")
	}
	if hosts := strings.Split(host, ","); len(hosts) > 1 {
		host = hosts[0]
		ports := strings.Split(port, ",")
		port = ports[0]
		notes = append(notes, "ttlproxy connects to one host: "+host+" is kept")
	}
	up := net.JoinHostPort(host, port)
	if len(im.upstreams) > 0 && im.upstreams[0] != up {
		notes = append(notes, "ttlproxy sends every database to one upstream, "+im.upstreams[0])
	}
	im.upstreams = append(im.upstreams, up)
	if l.key != "*" && im.firstDB == "" {
		im.firstDB = l.key
	}
	if db := kv["dbname"]; db != "" && db != l.key && l.key != "*" {
		notes = append(notes, "ttlproxy does not rename databases: clients connect to "+db+" itself")
	}
	for _, k := range []string{"user", "password", "auth_user", "auth_query", "auth_dbname", "pool_size", "min_pool_size",
		"reserve_pool", "reserve_pool_size", "connect_query", "pool_mode", "max_db_connections", "max_db_client_connections",
		"server_lifetime", "client_encoding", "datestyle", "timezone", "load_balance_hosts"} {
		if _, ok := kv[k]; ok {
			notes = append(notes, k+" per database is not supported")
		}
	}
	if len(notes) > 0 {
		im.skip(l, strings.Join(notes, "; "))
	}
}

// peer reads one [peers] entry.
func (im *pgbImporter) peer(l iniLine) {
	id, err := strconv.Atoi(l.key)
	kv, kerr := parseConnString(l.value)
	if err != nil || kerr != nil || kv["host"] == "" {
		im.skip(l, "want `id = host=… [port=…]`")
		return
	}
	p := pgbPeer{ID: id, Host: kv["host"]}
	if kv["port"] != "" {
		n, err := strconv.Atoi(kv["port"])
		if err != nil {
			im.skip(l, "not a port number")
			return
		}
		p.Port = n
	}
	im.peers = append(im.peers, p)
}

// pgbPeer is one entry of peers, as the file writes it.
type pgbPeer struct {
	ID   int    `yaml:"id"`
	Host string `yaml:"host"`
	Port int    `yaml:"port,omitempty"`
}

// parseConnString parses libpq's key=value form: values may be quoted with
// single quotes, a backslash escaping a quote or a backslash
// (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING).
func parseConnString(s string) (map[string]string, error) {
	kv := map[string]string{}
	for i := 0; ; {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i == len(s) {
			return kv, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq <= 0 {
			return nil, fmt.Errorf("want key=value at %q", s[i:])
		}
		key := strings.TrimSpace(s[i : i+eq])
		i += eq + 1
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		var b strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated quoted value of %s", key)
			}
			i++
		} else {
			for ; i < len(s) && s[i] != ' ' && s[i] != '\t'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
		}
		kv[key] = b.String()
	}
}

// pgbOrder is the order of the keys in the file written, as in
// docs/configuration.md.
var pgbOrder = []string{"listen", "listen_reuseport", "upstream", "tls", "upstream_tls", "upstream_tcp", "limits",
	"client_login_timeout", "idle_transaction_timeout", "idle_session_timeout", "pool_mode", "auth_type", "auth_file",
	"auth_query", "auth_dsn", "default_pool_size", "min_pool_size", "reserve_pool_size", "reserve_pool_timeout",
	"max_db_connections", "server_lifetime", "server_idle_timeout", "server_connect_timeout", "server_login_retry",
	"query_wait_timeout", "peer_id", "peers"}

// finish writes the file and checks that Parse accepts it.
func (im *pgbImporter) finish() (*PgBouncerImport, error) {
	if im.listenAddr != "" {
		host := im.listenAddr
		if host == "*" {
			host = ""
		}
		im.set("listen", net.JoinHostPort(host, im.listenPort))
	} else {
		im.skipped = append(im.skipped, PgBouncerSetting{Section: "pgbouncer", Key: "listen_addr",
			Why: "not set: PgBouncer listens on its Unix socket alone; ttlproxy listens on " + DefaultListen})
	}
	if len(im.upstreams) > 0 {
		im.set("upstream", im.upstreams[0])
	} else {
		return nil, fmt.Errorf("no [databases] entry: ttlproxy needs the server's host and port for upstream")
	}
	if im.authUser != "" {
		db := im.authDB
		if db == "" {
			db = im.firstDB
		}
		host, port, _ := net.SplitHostPort(im.upstreams[0])
		dsn := "host=" + host + " port=" + port + " user=" + im.authUser
		if db != "" {
			dsn += " dbname=" + db
		}
		im.set("auth_dsn", dsn)
		if im.authFile != nil {
			im.skip(*im.authFile, "ttlproxy looks users up with auth_query alone when auth_user is set: a user listed only "+
				"in auth_file must be found by the query; auth_user's password goes into auth_dsn, PGPASSWORD or ~/.pgpass")
		}
	} else if im.authFile != nil {
		im.set("auth_file", im.authFile.value)
	}
	if len(im.peers) > 0 {
		im.set("peers", im.peers)
	}

	doc := &yaml.Node{Kind: yaml.MappingNode}
	doc.HeadComment = "ttlproxy configuration made by `ttlproxy import-pgbouncer` from a PgBouncer configuration.\n" +
		"Add the TTL tables under `tables` (docs/configuration.md)."
	nested := map[string]*yaml.Node{}
	keys := sortedKeys(im.values)
	for _, key := range pgbOrder {
		for _, full := range keys {
			parent, child, isNested := strings.Cut(full, ".")
			if parent != key {
				continue
			}
			v := im.values[full]
			if !isNested {
				appendPair(doc, key, v)
				continue
			}
			m := nested[parent]
			if m == nil {
				m = &yaml.Node{Kind: yaml.MappingNode}
				nested[parent] = m
				doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: parent}, m)
			}
			appendPair(m, child, v)
		}
	}
	tables := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "tables"}, tables)
	if len(im.skipped) > 0 {
		var b strings.Builder
		b.WriteString("Not carried over from the PgBouncer configuration:")
		for _, s := range im.skipped {
			b.WriteString("\n  ")
			if s.File != "" {
				fmt.Fprintf(&b, "[%s] %s = %s: %s", s.Section, s.Key, s.Value, s.Why)
			} else {
				fmt.Fprintf(&b, "[%s] %s: %s", s.Section, s.Key, s.Why)
			}
		}
		doc.FootComment = b.String()
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{doc}}); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	if _, err := Parse(out.Bytes()); err != nil {
		return nil, fmt.Errorf("the translated configuration is not valid: %w", err)
	}
	return &PgBouncerImport{YAML: out.Bytes(), Skipped: im.skipped}, nil
}

// appendPair appends key: v to the mapping node m.
func appendPair(m *yaml.Node, key string, v any) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		panic(err) // strings, numbers, booleans and lists of maps of them
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, &n)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
