package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/ttlproxy/ttlproxy/config"
)

// serveOptions are the flags of `ttlproxy serve`.
type serveOptions struct {
	configPath  string
	listen      string
	upstream    string
	adminListen string
	// peerID overrides peer_id when peerIDSet, so that the instances of a
	// StatefulSet share one configuration file.
	peerID    int
	peerIDSet bool
	logLevel  string
	logFormat string
}

func parseServeFlags(args []string, stderr io.Writer) (serveOptions, int, bool) {
	var o serveOptions
	fs := newFlagSet("serve", "--config FILE [flags]", stderr)
	fs.StringVar(&o.configPath, "config", "", "configuration `file` (required)")
	fs.StringVar(&o.listen, "listen", "", "client-facing `host:port`, overrides listen in the file")
	fs.StringVar(&o.upstream, "upstream", "", "database server `host:port`, overrides upstream in the file")
	fs.StringVar(&o.adminListen, "admin-listen", "", "admin HTTP `host:port`, overrides admin_listen in the file")
	fs.IntVar(&o.peerID, "peer-id", 0, "the instance's peer `id` (1-16383, 0: not peered), overrides peer_id in the file")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log `format`: text or json")
	if code, ok := parseFlags(fs, args); !ok {
		return o, code, false
	}
	if fs.NArg() > 0 {
		return o, usageError(fs, "unexpected argument %q", fs.Arg(0)), false
	}
	if o.configPath == "" {
		return o, usageError(fs, "--config is required"), false
	}
	fs.Visit(func(f *flag.Flag) { o.peerIDSet = o.peerIDSet || f.Name == "peer-id" })
	if o.peerIDSet && (o.peerID < 0 || o.peerID > config.MaxPeerID) {
		return o, usageError(fs, "--peer-id: %d is not between 0 and %d", o.peerID, config.MaxPeerID), false
	}
	for _, a := range []struct {
		flag, value string
		needHost    bool
	}{
		{"--listen", o.listen, false},
		{"--upstream", o.upstream, true},
		{"--admin-listen", o.adminListen, false},
	} {
		if a.value == "" {
			continue
		}
		if err := config.CheckAddress(a.value, a.needHost); err != nil {
			return o, usageError(fs, "%s: %v", a.flag, err), false
		}
	}
	return o, exitOK, true
}

// applyOverrides puts the address flags and --peer-id over the file's
// values.
func (o serveOptions) applyOverrides(cfg *config.Config) {
	if o.listen != "" {
		cfg.Listen = o.listen
	}
	if o.upstream != "" {
		cfg.Upstream = o.upstream
	}
	if o.adminListen != "" {
		cfg.AdminListen = o.adminListen
	}
	if o.peerIDSet {
		cfg.PeerID = o.peerID
	}
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code, ok := parseServeFlags(args, stderr)
	if !ok {
		return code
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy serve: %v\n", err)
		return exitUsage
	}
	cfg, err := config.Load(o.configPath)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy serve: %v\n", err)
		return exitFailure
	}
	o.applyOverrides(cfg)
	applyGOMAXPROCS(cfg.GOMAXPROCS, log)

	st, err := newStack(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy serve: %v\n", err)
		return exitFailure
	}
	st.reloadFrom = func() (*config.Config, error) {
		cfg, err := config.Load(o.configPath)
		if err != nil {
			return nil, err
		}
		o.applyOverrides(cfg)
		return cfg, nil
	}
	ln, err := listen(ctx, cfg.Listen, cfg.ListenReusePort)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy serve: %v\n", err)
		return exitFailure
	}
	var lc net.ListenConfig
	adminLn, err := lc.Listen(ctx, "tcp", cfg.AdminListen)
	if err != nil {
		_ = ln.Close()
		fmt.Fprintf(stderr, "ttlproxy serve: %v\n", err)
		return exitFailure
	}
	log.Info("ttlproxy starting", "version", readVersion().Version,
		"tables", len(cfg.Tables), "sweeper", st.sweeper != nil)
	if err := st.run(ctx, ln, adminLn); err != nil {
		log.Error("ttlproxy stopped", "error", err)
		return exitFailure
	}
	return exitOK
}
