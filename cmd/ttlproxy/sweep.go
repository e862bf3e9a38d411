package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/ttlproxy/ttlproxy/config"
)

// runSweep runs one sweep of the configured tables and exits: for cron and
// Kubernetes CronJobs, and to measure the sweeper (bench/sweep.sh).
func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sweep", "--config FILE --once", stderr)
	configPath := fs.String("config", "", "configuration `file` (required; its sweeper section and tables)")
	once := fs.Bool("once", false, "run one pass over every table and exit (required: the sweeper otherwise runs inside serve)")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	if *configPath == "" {
		return usageError(fs, "--config is required")
	}
	if !*once {
		return usageError(fs, "--once is required")
	}
	log, err := newLogger(stderr, *logLevel, "text")
	if err != nil {
		return usageError(fs, "%v", err)
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy sweep: %v\n", err)
		return exitFailure
	}
	if cfg.Sweeper == nil || len(cfg.Tables) == 0 {
		fmt.Fprintln(stderr, "ttlproxy sweep: the configuration has no sweeper section or no tables")
		return exitFailure
	}
	st := &stack{log: log}
	sw, err := st.newSweeper(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy sweep: %v\n", err)
		return exitFailure
	}
	defer sw.Stop()
	start := time.Now()
	res, err := sw.RunOnce(ctx)
	elapsed := time.Since(start)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tDELETED\tBATCHES\tERROR")
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range res.Deleted {
			if !yield(k) {
				return
			}
		}
	}) {
		e := ""
		if res.Errors[name] != nil {
			e = res.Errors[name].Error()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", name, res.Deleted[name], res.Batches[name], e)
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "elapsed %s\n", elapsed.Round(time.Millisecond))
	if err != nil {
		log.Error("sweep failed", slog.Any("err", err))
		return exitFailure
	}
	if len(res.Errors) > 0 {
		return exitFailure
	}
	return exitOK
}
