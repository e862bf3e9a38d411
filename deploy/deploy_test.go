package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/internal/metricnames"
)

// codeMetrics returns the names of every metric ttlproxy registers.
func codeMetrics(t *testing.T) []string {
	t.Helper()
	names, err := metricnames.Registered("../cmd/ttlproxy")
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var metricRef = regexp.MustCompile(`ttlproxy_[a-z_]+`)

// referenced returns the metric names text uses, histogram series folded
// onto their metric.
func referenced(text string) []string {
	var out []string
	for _, m := range metricRef.FindAllString(text, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(m, suffix); ok && strings.HasSuffix(base, "_seconds") {
				m = base
			}
		}
		out = append(out, m)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // files of the kit, listed by the test
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFilesParse: every YAML and JSON file of the kit parses, and the
// ttlproxy configurations in it load.
func TestFilesParse(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml":
			dec := yaml.NewDecoder(strings.NewReader(read(t, path)))
			for {
				var v any
				if err := dec.Decode(&v); err != nil {
					if err.Error() != "EOF" {
						t.Errorf("%s: %v", path, err)
					}
					break
				}
			}
		case ".json":
			var v any
			if err := json.Unmarshal([]byte(read(t, path)), &v); err != nil {
				t.Errorf("%s: %v", path, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse([]byte(read(t, "ttlproxy.yaml"))); err != nil {
		t.Errorf("ttlproxy.yaml: %v", err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "kubernetes/configmap.yaml")), &cm); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse([]byte(cm.Data["ttlproxy.yaml"])); err != nil {
		t.Errorf("kubernetes/configmap.yaml ttlproxy.yaml: %v", err)
	}
	// The compose kit's admin web configuration loads as exporter-toolkit
	// loads it (the Kubernetes one names certificates of a Secret).
	if err := web.Validate("web.yml"); err != nil {
		t.Errorf("web.yml: %v", err)
	}
	var webCfg struct {
		TLS struct {
			CertFile string `yaml:"cert_file"`
		} `yaml:"tls_server_config"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["web.yml"]), &webCfg); err != nil || webCfg.TLS.CertFile == "" {
		t.Errorf("kubernetes/configmap.yaml web.yml: %v, no tls_server_config.cert_file", err)
	}
	unit := read(t, "systemd/ttlproxy.service")
	for _, want := range []string{"ExecReload=/bin/kill -HUP $MAINPID", "ExecStart=/usr/local/bin/ttlproxy serve", "NoNewPrivileges=yes"} {
		if !strings.Contains(unit, want) {
			t.Errorf("systemd unit lacks %q", want)
		}
	}
	dep := read(t, "kubernetes/deployment.yaml")
	for _, want := range []string{"path: /readyz", "path: /healthz"} {
		if !strings.Contains(dep, want) {
			t.Errorf("deployment lacks the probe %q", want)
		}
	}
}

// TestMetricsCovered: the dashboard shows every metric ttlproxy registers,
// and the dashboard and the alerts use no metric it does not.
func TestMetricsCovered(t *testing.T) {
	known := codeMetrics(t)
	if len(known) < 20 {
		t.Fatalf("found only %d metrics in the code: %v", len(known), known)
	}
	dashboard := read(t, "grafana/ttlproxy-dashboard.json")
	used := referenced(dashboard)
	for _, m := range known {
		if !slices.Contains(used, m) {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
	alerts := read(t, "prometheus/alerts.yml")
	for _, m := range append(used, referenced(alerts)...) {
		if !slices.Contains(known, m) {
			t.Errorf("the kit uses %s, which ttlproxy does not register", m)
		}
	}
}

// TestAlertRules runs promtool check rules and test rules (Debian package
// prometheus); with CI=true promtool is required.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but promtool is not installed (apt-get install prometheus)")
		}
		t.Skip("promtool not installed")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...) //nolint:gosec // promtool found on PATH by the test
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
