package main

import (
	"log/slog"
	"os"
	"runtime"
)

// DefaultGOMAXPROCS is the Go scheduler's thread count when neither the
// configuration's gomaxprocs nor the GOMAXPROCS environment variable sets
// one. One thread relays a transaction for the least CPU: pgbench -S -M
// prepared on 2 cores, one thread against two, cost 24.6 against 29.1 µs of
// proxy CPU per transaction at -c 8, 22.1 against 23.3 at -c 32 and 28.6
// against 32.4 at -c 100, with no futex wake-ups left (0.2 to 0.7 per
// transaction with two), at the same or higher throughput from -c 32 on.
// Like PgBouncer, one process then uses one core: more cores take
// gomaxprocs, or several processes on one port (listen_reuseport).
const DefaultGOMAXPROCS = 1

// applyGOMAXPROCS sets runtime.GOMAXPROCS: the configuration's gomaxprocs
// (n > 0), else the GOMAXPROCS environment variable when it is set (Go's
// runtime has applied it already), else DefaultGOMAXPROCS.
func applyGOMAXPROCS(n int, log *slog.Logger) {
	source := "config"
	switch {
	case n > 0:
	case os.Getenv("GOMAXPROCS") != "":
		n, source = runtime.GOMAXPROCS(0), "environment"
	default:
		n, source = DefaultGOMAXPROCS, "default"
	}
	runtime.GOMAXPROCS(n)
	log.Info("go scheduler", "gomaxprocs", n, "source", source, "cpus", runtime.NumCPU())
}
