package main

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/dockerfile"
	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// TestMain starts the test PostgreSQL only for TestImage, which image.sh
// runs.
func TestMain(m *testing.M) {
	if os.Getenv(envImageConfig) != "" {
		pgtest.Main(m)
		return
	}
	os.Exit(m.Run())
}

func readStage(t *testing.T) *dockerfile.Stage {
	t.Helper()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := dockerfile.ParseRuntime(f)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestShellOutput: what image.sh evaluates gives back, through bash, the
// values dockerstage computed, quotes and spaces included.
func TestShellOutput(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	st := readStage(t)
	st.Runs = append(st.Runs, `echo 'it''s' "$HOME" \ && true`)
	st.Labels["q"] = `a 'b' "c" $d`
	args := map[string]string{"VERSION": "v1 '2'"}
	var out bytes.Buffer
	if err := printShell(&out, st, args); err != nil {
		t.Fatal(err)
	}
	script := out.String() + `printf '%s\0' "$suite" "$binary_dest" "$base_path"; printf '%s\0' "${runs[@]}"; printf '%s\0' "${config_args[@]}"`
	got, err := exec.Command(bash, "-c", script).Output() //nolint:gosec // bash found on PATH, the test's own script
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := append([]string{"bookworm", "/usr/local/bin/ttlproxy", basePath}, st.Runs...)
	want = append(want, configArgs(st, args)...)
	if g := strings.Split(strings.TrimSuffix(string(got), "\x00"), "\x00"); !slices.Equal(g, want) {
		t.Errorf("bash read\n%q\nwant\n%q", g, want)
	}
	if !slices.Contains(want, "org.opencontainers.image.version=v1 '2'") {
		t.Errorf("the version label is not the build argument: %q", want)
	}
}

func TestSuite(t *testing.T) {
	for from, want := range map[string]string{"debian:bookworm-slim": "bookworm", "debian:trixie-slim": "trixie",
		"debian:bookworm": "", "ubuntu:noble": "", "debian:bookworm-slim@sha256:00": "", "debian:-slim": ""} {
		got, err := suite(&dockerfile.Stage{From: from})
		if got != want || (want == "") != (err != nil) {
			t.Errorf("suite(%s) = %q, %v; want %q", from, got, err, want)
		}
	}
}

// lockedBuffer collects a process's output for the test's messages.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
