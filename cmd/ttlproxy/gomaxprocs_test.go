package main

import (
	"runtime"
	"testing"
)

// TestApplyGOMAXPROCS: the configuration's gomaxprocs wins, then the
// environment variable, then DefaultGOMAXPROCS.
func TestApplyGOMAXPROCS(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	log := discardLogger()

	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(2)
	applyGOMAXPROCS(0, log)
	if got := runtime.GOMAXPROCS(0); got != DefaultGOMAXPROCS {
		t.Errorf("no setting: GOMAXPROCS %d, want the default %d", got, DefaultGOMAXPROCS)
	}
	applyGOMAXPROCS(3, log)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("gomaxprocs: 3: GOMAXPROCS %d, want 3", got)
	}
	// The runtime applies the environment variable at start; the proxy
	// keeps what it applied.
	t.Setenv("GOMAXPROCS", "2")
	runtime.GOMAXPROCS(2)
	applyGOMAXPROCS(0, log)
	if got := runtime.GOMAXPROCS(0); got != 2 {
		t.Errorf("GOMAXPROCS=2 in the environment: GOMAXPROCS %d, want 2", got)
	}
}
