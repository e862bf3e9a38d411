// Package compose checks the deployment kit's docker-compose.yaml with the
// Compose Specification's reference loader. It is a module of its own so
// that compose-go and what it pulls in (Docker's packages, a JSON-schema
// library, logrus) stay out of the proxy's module.
package compose

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// TestCompose loads ../docker-compose.yaml as `docker compose config` does:
// the file is checked against the specification's JSON schema and its
// references (services a service depends on, volumes, networks) must
// resolve. It names the four services of the kit.
func TestCompose(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{"../docker-compose.yaml"}, cli.WithOsEnv, cli.WithWorkingDirectory(".."))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yaml: %v", err)
	}
	names := slices.Sorted(maps.Keys(p.Services))
	if want := []string{"grafana", "postgres", "prometheus", "ttlproxy"}; !slices.Equal(names, want) {
		t.Errorf("services %v, want %v", names, want)
	}
}
