package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/sweeper"
)

// runSweep runs one sweep of the configured tables and exits: for cron and
// Kubernetes CronJobs, and to measure the sweeper (bench/sweep.sh).
func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("sweep", "--config FILE (--once | --dry-run)", stderr)
	configPath := fs.String("config", "", "configuration `file` (required; its sweeper section and tables)")
	once := fs.Bool("once", false, "run one pass over every table and exit")
	dryRun := fs.Bool("dry-run", false, "print what a pass would do (expired rows and values, slices, the batch statements and their plans, warnings) without deleting")
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
	if *once == *dryRun {
		return usageError(fs, "give one of --once and --dry-run (the sweeper otherwise runs inside serve)")
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
	if *dryRun {
		return printPlan(ctx, sw, stdout, stderr)
	}
	start := time.Now()
	res, err := sw.RunOnce(ctx)
	elapsed := time.Since(start)
	printRun(stdout, "TABLE\tDELETED", res.Deleted, res)
	if len(res.Nulled) > 0 {
		// Expiring columns, as schema.table.column.
		fmt.Fprintln(stdout)
		printRun(stdout, "COLUMN\tNULLED", res.Nulled, res)
	}
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

// printRun prints one line per key of counts (the rows deleted per table or
// the values nulled per column) under header, with the key's batches,
// longest batch and error from res.
func printRun(stdout io.Writer, header string, counts map[string]int64, res sweeper.RunResult) {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header+"\tBATCHES\tLONGEST BATCH\tERROR")
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		e := ""
		if res.Errors[name] != nil {
			e = res.Errors[name].Error()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", name, counts[name], res.Batches[name],
			res.LongestBatch[name].Round(time.Millisecond/10), e)
	}
	_ = tw.Flush()
}

// printPlan prints sweeper.Plan: per table what a pass would do.
func printPlan(ctx context.Context, sw *sweeper.Sweeper, stdout, stderr io.Writer) int {
	plans, err := sw.Plan(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy sweep: %v\n", err)
		return exitFailure
	}
	for i, p := range plans {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		expired := fmt.Sprint(p.Expired)
		if p.Estimated {
			expired = "about " + expired + " (the planner's estimate)"
		}
		if p.Column != "" {
			fmt.Fprintf(stdout, "%s column %s\n  expired values now (in rows the row rule keeps): %s\n", p.Table, p.Column, expired)
		} else {
			fmt.Fprintf(stdout, "%s\n  expired rows now: %s\n", p.Table, expired)
		}
		if p.OldestExpired > 0 {
			fmt.Fprintf(stdout, "  oldest expired row: %s old\n", p.OldestExpired.Round(time.Second))
		}
		fmt.Fprintf(stdout, "  slices: %s\n  batch statement ($1 the cutoff, $2 the batch size):\n    %s\n",
			strings.Join(p.Slices, ", "), strings.ReplaceAll(p.Statement, "\n", "\n    "))
		if p.Explain != "" {
			fmt.Fprintf(stdout, "  plan of the rows a batch picks:\n    %s\n", strings.ReplaceAll(p.Explain, "\n", "\n    "))
		}
		if len(p.PartitionsToDrop) > 0 {
			how := "DETACH PARTITION, then DROP"
			if p.DetachConcurrently {
				how = "DETACH PARTITION … CONCURRENTLY, then DROP"
			}
			fmt.Fprintf(stdout, "  partitions to drop (%s): %s\n", how, strings.Join(p.PartitionsToDrop, ", "))
		}
		for _, w := range p.Warnings {
			fmt.Fprintf(stdout, "  WARNING: %s\n", w)
		}
	}
	fmt.Fprintln(stdout, "-- dry run: nothing was deleted or set to NULL")
	return exitOK
}
