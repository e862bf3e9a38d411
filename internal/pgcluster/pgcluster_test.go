package pgcluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestClusterDiesWithItsOwner starts a cluster from a child process that is
// then killed without cleanup: the watcher must stop the server and remove
// its directory.
func TestClusterDiesWithItsOwner(t *testing.T) {
	if os.Getenv("PGCLUSTER_CHILD") == "1" {
		c, err := Start(context.Background(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString(c.root + "\n")
		os.Stdout.Sync()
		time.Sleep(time.Hour) // killed by the parent
		return
	}
	if _, err := BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestClusterDiesWithItsOwner$") //nolint:gosec // runs the test binary itself
	cmd.Env = append(os.Environ(), "PGCLUSTER_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := out.Read(buf)
	if err != nil || n == 0 {
		_ = cmd.Process.Kill()
		t.Fatalf("child did not report its cluster: %v", err)
	}
	root := string(buf[:n-1])
	pidFile := filepath.Join(root, "data", "postmaster.pid")
	if _, err := os.Stat(pidFile); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("cluster not running in %s: %v", root, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // killed: the exit status is the signal
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(root); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster in %s outlived its killed owner", root)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
