package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// runRewrite prints what the proxy would send for one Query text. The
// rewriter runs without a catalog (there is no server), as for a session
// whose catalog has not been read: statements that need it are rejected.
func runRewrite(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("rewrite", `--config FILE [--search-path a,b] "SQL" (or "-" to read standard input)`, stderr)
	configPath := fs.String("config", "", "configuration `file` (required)")
	searchPath := fs.String("search-path", "", "session search_path, comma-separated `schemas` (default public)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *configPath == "" {
		return usageError(fs, "--config is required")
	}
	switch {
	case fs.NArg() == 0:
		return usageError(fs, "missing SQL argument")
	case fs.NArg() > 1:
		return usageError(fs, "want one SQL argument, got %d (quote the statement)", fs.NArg())
	}
	sql := fs.Arg(0)
	if sql == "-" {
		b, err := io.ReadAll(stdinReader)
		if err != nil {
			fmt.Fprintf(stderr, "ttlproxy rewrite: reading standard input: %v\n", err)
			return exitFailure
		}
		sql = string(b)
	}

	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy rewrite: %v\n", err)
		return exitFailure
	}
	rw, err := newRewriter(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy rewrite: %v\n", err)
		return exitFailure
	}
	var sess rewrite.Session
	if *searchPath != "" {
		for _, s := range strings.Split(*searchPath, ",") {
			if s = strings.TrimSpace(s); s != "" {
				sess.SearchPath = append(sess.SearchPath, s)
			}
		}
	}
	res, err := rw.Rewrite(sql, rewrite.NewState(sess))
	if err != nil {
		var rerr *rewrite.Error
		if !errors.As(err, &rerr) {
			fmt.Fprintf(stderr, "ttlproxy rewrite: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(stderr, "rejected: SQLSTATE %s: %s\n", rerr.Code, rerr.Message)
		if rerr.Detail != "" {
			fmt.Fprintf(stderr, "DETAIL: %s\n", rerr.Detail)
		}
		if rerr.Hint != "" {
			fmt.Fprintf(stderr, "HINT: %s\n", rerr.Hint)
		}
		return exitFailure
	}
	fmt.Fprintln(stdout, res.SQL)
	return exitOK
}
