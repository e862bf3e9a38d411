// Package pgcluster starts and stops a throw-away PostgreSQL cluster: initdb
// into a temporary directory, a server on a free loopback port, and removal of
// everything on Stop. It serves `ttlproxy demo` and the test harness.
//
// The server binaries (initdb, pg_ctl, postgres) are found on PATH, in the
// directory named by PG_BINDIR, or in /usr/lib/postgresql/<version>/bin (the
// newest version wins). When the process runs as root, the cluster runs as the
// `postgres` OS user, since PostgreSQL refuses to run as root.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options configures Start. The zero value is usable.
type Options struct {
	// Port to listen on; 0 picks a free port.
	Port int
	// Password of the superuser "postgres"; "" means "postgres".
	Password string
	// HBA lines placed before the default `host all all 127.0.0.1/32
	// scram-sha-256` line, e.g. "host all ttl_trust 127.0.0.1/32 trust".
	HBA []string
	// Settings are extra server settings (name → value) passed with -c.
	Settings map[string]string
	// StartTimeout bounds initdb plus server start; 0 means 60s.
	StartTimeout time.Duration
}

// Cluster is a running throw-away server. All connections use TCP on Host.
type Cluster struct {
	Host     string
	Port     int
	User     string
	Password string
	// DataDir is the cluster's data directory (inside a temporary directory
	// that Stop removes).
	DataDir string
	// BinDir holds the server binaries used.
	BinDir string

	root string
	cred *syscall.Credential
}

// Addr returns "host:port".
func (c *Cluster) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// ConnString returns a URL for database db as the superuser, e.g.
// postgres://postgres:postgres@127.0.0.1:5432/db?sslmode=disable.
func (c *Cluster) ConnString(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(c.User, c.Password),
		Host:     c.Addr(),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// BinDir returns the directory holding initdb, pg_ctl and postgres.
func BinDir() (string, error) {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		if isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
		return "", fmt.Errorf("PG_BINDIR=%s has no initdb", d)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return pgVersion(matches[i]) > pgVersion(matches[j]) })
	for _, m := range matches {
		if isExec(m) {
			return filepath.Dir(m), nil
		}
	}
	return "", errors.New("PostgreSQL server binaries not found: install the postgresql package, put initdb on PATH, or set PG_BINDIR")
}

func pgVersion(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p) //nolint:gosec // a candidate server binary, from PATH, PG_BINDIR or the distribution
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start runs initdb and starts the server; the caller must call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	c := &Cluster{Host: "127.0.0.1", User: "postgres", Password: opts.Password, BinDir: bin}
	if c.Password == "" {
		c.Password = "postgres"
	}
	if c.root, err = os.MkdirTemp("", "ttlproxy-pg-"); err != nil {
		return nil, err
	}
	c.DataDir = filepath.Join(c.root, "data")
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop() // the error that got us here is the one returned
		}
	}()
	if os.Geteuid() == 0 {
		if c.cred, err = postgresCredential(); err != nil {
			return nil, err
		}
		if err := os.Chown(c.root, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	pwfile := filepath.Join(c.root, "pwfile")
	if err := os.WriteFile(pwfile, []byte(c.Password+"\n"), 0o600); err != nil {
		return nil, err
	}
	if c.cred != nil {
		if err := os.Chown(pwfile, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	if out, err := c.command(ctx, "initdb", "-D", c.DataDir, "-U", c.User, "--pwfile", pwfile,
		"-A", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	os.Remove(pwfile)

	hba := strings.Join(opts.HBA, "\n") + "\nhost all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(c.DataDir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, err
	}
	settings := map[string]string{
		"listen_addresses":        c.Host,
		"unix_socket_directories": "",
		"fsync":                   "off",
		"synchronous_commit":      "off",
		"full_page_writes":        "off",
		"max_connections":         "200",
		"shared_buffers":          "128MB",
		"log_min_messages":        "warning",
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	var conf strings.Builder
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&conf, "%s = '%s'\n", k, strings.ReplaceAll(settings[k], "'", "''"))
	}
	if err := appendFile(filepath.Join(c.DataDir, "postgresql.conf"), conf.String()); err != nil {
		return nil, err
	}

	// A free port can be taken between the probe and the server's bind: retry.
	for attempt := 0; ; attempt++ {
		c.Port = opts.Port
		if c.Port == 0 {
			if c.Port, err = freePort(); err != nil {
				return nil, err
			}
		}
		out, err := c.command(ctx, "pg_ctl", "-D", c.DataDir, "-l", filepath.Join(c.root, "server.log"),
			"-o", fmt.Sprintf("-p %d", c.Port), "-w", "-t", strconv.Itoa(int(timeout.Seconds())), "start").CombinedOutput()
		if err == nil {
			break
		}
		log, _ := os.ReadFile(filepath.Join(c.root, "server.log"))
		if opts.Port != 0 || attempt >= 3 || !strings.Contains(string(log), "could not bind") {
			return nil, fmt.Errorf("pg_ctl start: %w: %s\n%s", err, out, log)
		}
	}
	if err := c.watch(); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// watch starts a small detached shell that waits for this process to exit
// and then stops the server (immediate shutdown) and removes its directory.
// Stop does the same at once; the watcher covers a process that is killed
// first, such as a test binary at its -timeout or a demo sent SIGKILL, so no
// server outlives its owner.
func (c *Cluster) watch() error {
	script := `while kill -0 "$1" 2>/dev/null; do sleep 1; done
pid=$(head -n 1 "$2/postmaster.pid" 2>/dev/null)
if [ -n "$pid" ]; then
	kill -QUIT "$pid" 2>/dev/null
	while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
fi
rm -rf "$3"`
	cmd := exec.Command("/bin/sh", "-c", script, "pgcluster-watch", strconv.Itoa(os.Getpid()), c.DataDir, c.root) //nolint:gosec // a fixed script; its arguments are positional parameters, never shell text
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the cluster watcher: %w", err)
	}
	return cmd.Process.Release()
}

// Stop stops the server (fast shutdown, then immediate) and removes its
// directory. It is safe to call more than once.
func (c *Cluster) Stop() error {
	if c.root == "" {
		return nil
	}
	var err error
	if _, statErr := os.Stat(filepath.Join(c.DataDir, "postmaster.pid")); statErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, e := c.command(ctx, "pg_ctl", "-D", c.DataDir, "-m", "fast", "-w", "-t", "20", "stop").CombinedOutput(); e != nil {
			out2, e2 := c.command(ctx, "pg_ctl", "-D", c.DataDir, "-m", "immediate", "-w", "stop").CombinedOutput()
			if e2 != nil {
				err = fmt.Errorf("pg_ctl stop: %w: %s %s", e2, out, out2)
			}
		}
	}
	if e := os.RemoveAll(c.root); e != nil && err == nil {
		err = e
	}
	c.root = ""
	return err
}

// Restart restarts the server with `pg_ctl restart -m mode` (smart, fast
// or immediate) on its port and waits until it accepts connections.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	return c.pgCtl(ctx, "-m", mode, "restart")
}

// StopServer stops the server (`pg_ctl stop -m mode`) and keeps its data
// directory, for StartServer.
func (c *Cluster) StopServer(ctx context.Context, mode string) error {
	return c.pgCtl(ctx, "-m", mode, "stop")
}

// StartServer starts a stopped server again on its port and waits until it
// accepts connections. After a crash of the postmaster its orphaned
// backends keep the shared memory for a moment, and the server refuses to
// start until they are gone: it tries again until ctx ends.
func (c *Cluster) StartServer(ctx context.Context) error {
	for {
		err := c.pgCtl(ctx, "start")
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PostmasterPID returns the process ID of the running postmaster (the first
// line of postmaster.pid).
func (c *Cluster) PostmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(c.DataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// pgCtl runs pg_ctl on the cluster's data directory with args, waiting
// (-w) for the action to finish.
func (c *Cluster) pgCtl(ctx context.Context, args ...string) error {
	all := append([]string{"-D", c.DataDir, "-l", filepath.Join(c.root, "server.log"),
		"-o", fmt.Sprintf("-p %d", c.Port), "-w", "-t", "60"}, args...)
	if out, err := c.command(ctx, "pg_ctl", all...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ServerLog returns the server's log file contents (for failing tests).
func (c *Cluster) ServerLog() string {
	b, _ := os.ReadFile(filepath.Join(c.root, "server.log"))
	return string(b)
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.BinDir, name), args...) //nolint:gosec // a PostgreSQL binary from the cluster's own bin directory
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	// pg_ctl's server must outlive ctx; only initdb/pg_ctl themselves are bounded.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.cred != nil {
		cmd.SysProcAttr.Credential = c.cred
	}
	return cmd
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres OS user (from the postgresql package): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0) //nolint:gosec // a file of the cluster's own data directory
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
