package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// The environment image.sh gives TestImage.
const (
	// envImageConfig names the output of `buildah inspect --type image`.
	envImageConfig = "TTLPROXY_IMAGE_CONFIG"
	// envImageRootfs names the image's root filesystem, mounted read-only.
	envImageRootfs = "TTLPROXY_IMAGE_ROOTFS"
	// envImageEtc names the writable directory mounted over the
	// configuration's directory.
	envImageEtc = "TTLPROXY_IMAGE_ETC"
	// envImageVersion is the version the image was labelled with.
	envImageVersion = "TTLPROXY_IMAGE_VERSION"
)

// imageConfig is the part of Docker's image configuration TestImage reads.
type imageConfig struct {
	User         string
	ExposedPorts map[string]struct{}
	Env          []string
	Entrypoint   []string
	Cmd          []string
	Labels       map[string]string
	Healthcheck  *struct {
		Test                           []string
		Interval, Timeout, StartPeriod time.Duration
		Retries                        int
	}
}

// TestImage checks the image release/image.sh assembled: its configuration
// is the Dockerfile's runtime stage, and the binary runs from its root
// filesystem (read-only) as its user: version, the CA bundle and time zones
// are there, and the image's command serves a query against the test
// PostgreSQL while the image's health check passes.
func TestImage(t *testing.T) {
	inspect := os.Getenv(envImageConfig)
	if inspect == "" {
		t.Skip("release/image.sh runs this test on the image it assembles")
	}
	rootfs, etc, version := os.Getenv(envImageRootfs), os.Getenv(envImageEtc), os.Getenv(envImageVersion)
	b, err := os.ReadFile(inspect) //nolint:gosec // the file image.sh names
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Docker struct {
			Config imageConfig `json:"config"`
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	img := doc.Docker.Config
	st := readStage(t)

	// The configuration, field by field.
	if img.User != st.User {
		t.Errorf("user %q, the Dockerfile's %q", img.User, st.User)
	}
	if !slices.Equal(img.Entrypoint, st.Entrypoint) || !slices.Equal(img.Cmd, st.Cmd) {
		t.Errorf("entrypoint %q cmd %q, the Dockerfile's %q %q", img.Entrypoint, img.Cmd, st.Entrypoint, st.Cmd)
	}
	var ports []string
	for _, p := range st.Expose {
		if !strings.Contains(p, "/") {
			p += "/tcp"
		}
		ports = append(ports, p)
	}
	if got := slices.Sorted(maps.Keys(img.ExposedPorts)); !slices.Equal(got, slices.Sorted(slices.Values(ports))) {
		t.Errorf("exposed ports %v, the Dockerfile's %v", got, ports)
	}
	for k, v := range st.Labels {
		if want := st.Expand(v, map[string]string{"VERSION": version}); img.Labels[k] != want {
			t.Errorf("label %s=%q, the Dockerfile's %q", k, img.Labels[k], want)
		}
	}
	for k := range img.Labels {
		if _, ok := st.Labels[k]; !ok && !strings.HasPrefix(k, "io.buildah.") {
			t.Errorf("label %s is not the Dockerfile's", k)
		}
	}
	if hc := img.Healthcheck; hc == nil || !slices.Equal(hc.Test, append([]string{"CMD"}, st.Healthcheck.Test...)) ||
		hc.Interval != st.Healthcheck.Interval || hc.Timeout != st.Healthcheck.Timeout ||
		hc.StartPeriod != st.Healthcheck.StartPeriod || hc.Retries != st.Healthcheck.Retries {
		t.Errorf("health check %+v, the Dockerfile's %+v", hc, st.Healthcheck)
	}
	if !slices.Contains(img.Env, "PATH="+basePath) {
		t.Errorf("env %v lacks the base image's PATH", img.Env)
	}
	if t.Failed() {
		t.FailNow()
	}

	// The root filesystem.
	dest, err := binaryDest(st)
	if err != nil {
		t.Fatal(err)
	}
	var found string
	for _, dir := range filepath.SplitList(basePath) {
		if fi, err := os.Stat(filepath.Join(rootfs, dir, img.Entrypoint[0])); err == nil && fi.Mode()&0o111 != 0 { //nolint:gosec // a file of the image's root filesystem, which image.sh names
			found = path.Join(dir, img.Entrypoint[0])
			break
		}
	}
	if found != dest {
		t.Errorf("the entrypoint %s is %q on the image's PATH, want the binary at %s", img.Entrypoint[0], found, dest)
	}
	pem, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt")) //nolint:gosec // a file of the image's root filesystem, which image.sh names
	if err != nil {
		t.Errorf("the CA bundle: %v", err)
	} else if n := bytes.Count(pem, []byte("BEGIN CERTIFICATE")); n < 50 || !x509.NewCertPool().AppendCertsFromPEM(pem) {
		t.Errorf("the CA bundle holds %d certificates", n)
	}
	tz, err := os.ReadFile(filepath.Join(rootfs, "usr/share/zoneinfo/Europe/Berlin")) //nolint:gosec // a file of the image's root filesystem, which image.sh names
	if err == nil {
		_, err = time.LoadLocationFromTZData("Europe/Berlin", tz)
	}
	if err != nil {
		t.Errorf("time zones: %v", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "probe"), nil, 0o600); err == nil || !strings.Contains(err.Error(), "read-only") { //nolint:gosec // a file of the image's root filesystem, which image.sh names
		t.Errorf("the root filesystem is not mounted read-only (image.sh): %v", err)
	}

	// The binary, as the image runs it: chroot as the image's user, the
	// image's environment only.
	inImage := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "chroot", append([]string{"--userspec=" + img.User, rootfs}, args...)...) //nolint:gosec // the image's own command line
		cmd.Env = img.Env
		return cmd
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := inImage(ctx, append(slices.Clone(img.Entrypoint), "version")...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ttlproxy "+version+"\n") || !strings.Contains(string(out), "\nparser:  pg_query_go") {
		t.Fatalf("version in the image: %v\n%s", err, out)
	}
	t.Logf("in the image, as %s:\n%s", img.User, out)

	// The image's command against the test PostgreSQL.
	srv := pgtest.Server(t)
	db := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, srv.ConnString(db))
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE TABLE public.items (id int PRIMARY KEY, expires_at timestamptz);
		INSERT INTO public.items VALUES (1, now() - interval '1 hour'), (2, now() + interval '1 hour'), (3, NULL)`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listen, admin := freePort(t), freePort(t)
	cfgFile := st.Cmd[slices.Index(st.Cmd, "--config")+1]
	cfg := fmt.Sprintf("listen: 127.0.0.1:%d\nadmin_listen: 0.0.0.0:%d\nupstream: %s\ntables:\n  - table: public.items\n    column: expires_at\n",
		listen, admin, srv.Addr())
	if err := os.WriteFile(filepath.Join(etc, path.Base(cfgFile)), []byte(cfg), 0o644); err != nil { //nolint:gosec // read by the image's user
		t.Fatal(err)
	}
	serve := inImage(ctx, append(slices.Clone(img.Entrypoint), img.Cmd...)...)
	var log lockedBuffer
	serve.Stdout, serve.Stderr = &log, &log
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve in the image: %v\n%s", err, log.String())
			}
		case <-time.After(30 * time.Second):
			_ = serve.Process.Kill()
			t.Errorf("serve in the image did not stop on SIGTERM\n%s", log.String())
		}
	}()

	// The image's health check, as the engine runs it, until it passes.
	deadline := time.Now().Add(st.Healthcheck.StartPeriod + 10*time.Second)
	for {
		out, err := inImage(ctx, st.Healthcheck.Test...).CombinedOutput()
		if err == nil {
			t.Logf("health check: %s", out)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the image's health check: %v\n%s\nserve:\n%s", err, out, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if uid := procUID(t, serve.Process.Pid); !strings.HasPrefix(img.User, uid+":") {
		t.Errorf("serve runs as uid %s, the image's user is %s", uid, img.User)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", admin))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Errorf("/healthz = %d %q", resp.StatusCode, body)
	}
	proxied := strings.Replace(srv.ConnString(db), srv.Addr(), fmt.Sprintf("127.0.0.1:%d", listen), 1)
	pc, err := pgx.Connect(ctx, proxied)
	if err != nil {
		t.Fatalf("connecting through the proxy: %v\n%s", err, log.String())
	}
	defer pc.Close(ctx)
	var ids []int32
	rows, err := pc.Query(ctx, "SELECT id FROM items ORDER BY id")
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	}
	if err != nil || !slices.Equal(ids, []int32{2, 3}) {
		t.Errorf("SELECT through the proxy in the image: %v, %v; want the live rows 2 and 3\n%s", ids, err, log.String())
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// procUID returns the real uid of process pid.
func procUID(t *testing.T, pid int) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return ""
}
