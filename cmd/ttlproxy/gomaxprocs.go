package main

import (
	"log/slog"
	"os"
	"runtime"
)

// applyGOMAXPROCS sets runtime.GOMAXPROCS to the configuration's gomaxprocs
// (n > 0). n == 0 keeps Go's choice: the GOMAXPROCS environment variable
// when it is set, else the CPUs the process may use (its cgroup's CPU limit
// included). The relay's per-transaction cost is lowest with one thread,
// where the scheduler hands goroutines over without waking other threads;
// more use more cores (docs/performance.md has the figures).
func applyGOMAXPROCS(n int, log *slog.Logger) {
	if n > 0 {
		runtime.GOMAXPROCS(n)
	}
	log.Info("go scheduler", "gomaxprocs", runtime.GOMAXPROCS(0), "from_config", n > 0,
		"env", os.Getenv("GOMAXPROCS"))
}
