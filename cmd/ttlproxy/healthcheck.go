package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ttlproxy/ttlproxy/config"
)

// runHealthcheck asks a running proxy's admin server for /healthz and exits
// 0 when it answers 200: the container image's HEALTHCHECK, which cannot
// rely on curl or wget being in the image.
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("healthcheck", "[--config FILE | --url URL] [--timeout D]", stderr)
	cfgPath := fs.String("config", "", "the proxy's configuration `file`: /healthz on its admin_listen, over HTTPS when admin.web_config_file has tls_server_config")
	url := fs.String("url", "", "the `URL` to ask instead (default http://127.0.0.1:9187/healthz); user:password@ in it is sent as basic auth")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after `D`")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	if *cfgPath != "" && *url != "" {
		return usageError(fs, "--config and --url exclude each other")
	}
	target := *url
	if target == "" {
		var err error
		if target, err = healthURL(*cfgPath); err != nil {
			fmt.Fprintf(stderr, "ttlproxy healthcheck: %v\n", err)
			return exitFailure
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// A URL's user:password@ goes out as basic auth and never into the
	// output, which the container engine keeps.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return usageError(fs, "--url: %v", err)
	}
	target = req.URL.Redacted()
	// The probe asks the process on this host whether it is up, as the
	// kubelet's HTTPS probes do: it does not check the certificate, which
	// names the host as its clients reach it, and sends no credentials.
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a liveness probe of the local process, no credentials sent
	}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy healthcheck: %v\n", err)
		return exitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "ttlproxy healthcheck: %s: %s %s\n", target, resp.Status, strings.TrimSpace(string(body)))
		return exitFailure
	}
	fmt.Fprintf(stdout, "%s: %s\n", target, strings.TrimSpace(string(body)))
	return exitOK
}

// healthURL returns the /healthz URL of the admin server a configuration
// file describes (path "" : the default admin_listen, plain HTTP). A
// wildcard host (0.0.0.0, ::, none) is asked on the loopback address.
func healthURL(path string) (string, error) {
	addr, scheme := config.DefaultAdminListen, "http"
	if path != "" {
		cfg, err := config.Load(path)
		if err != nil {
			return "", err
		}
		addr = cfg.AdminListen
		if cfg.Admin.WebConfigFile != "" {
			tlsOn, err := webConfigTLS(cfg.Admin.WebConfigFile)
			if err != nil {
				return "", fmt.Errorf("admin.web_config_file: %w", err)
			}
			if tlsOn {
				scheme = "https"
			}
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("admin_listen: %w", err)
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.Equal(net.IPv4zero)):
		host = "127.0.0.1"
	case ip != nil && ip.Equal(net.IPv6unspecified):
		host = "::1"
	}
	return scheme + "://" + net.JoinHostPort(host, port) + "/healthz", nil
}

// webConfigTLS reports whether an exporter-toolkit web configuration serves
// TLS: it does when tls_server_config names a certificate, inline or as a
// file (exporter-toolkit's own test).
func webConfigTLS(path string) (bool, error) {
	b, err := os.ReadFile(path) //nolint:gosec // the file the configuration names
	if err != nil {
		return false, err
	}
	var wc struct {
		TLS struct {
			Cert     string `yaml:"cert"`
			CertFile string `yaml:"cert_file"`
		} `yaml:"tls_server_config"`
	}
	if err := yaml.Unmarshal(b, &wc); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return wc.TLS.Cert != "" || wc.TLS.CertFile != "", nil
}
