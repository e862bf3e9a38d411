package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/internal/dockerfile"
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

// k8sObject is the part of a Kubernetes manifest TestKubernetesPooling
// reads.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		// Service (a map of labels) and StatefulSet (matchLabels)
		ClusterIP                string         `yaml:"clusterIP"`
		PublishNotReadyAddresses bool           `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]any `yaml:"selector"`
		Ports                    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
		// StatefulSet
		ServiceName string `yaml:"serviceName"`
		Replicas    int    `yaml:"replicas"`
		Ordinals    struct {
			Start int `yaml:"start"`
		} `yaml:"ordinals"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []struct {
					Args  []string `yaml:"args"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					Env []struct {
						Name      string `yaml:"name"`
						ValueFrom struct {
							FieldRef struct {
								FieldPath string `yaml:"fieldPath"`
							} `yaml:"fieldRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name      string `yaml:"name"`
					ConfigMap struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// TestKubernetesPooling: the kit for transaction mode (kubernetes/pooling)
// holds together: the StatefulSet's pods take their peer id from their
// ordinal, which starts at 1; the ConfigMap's configuration loads, runs
// pool_mode transaction and lists one peer per pod, by the pod's name
// under the headless Service, on the port the pods listen on; the
// Services select the pods and name ports they have.
func TestKubernetesPooling(t *testing.T) {
	objs := map[string]k8sObject{}
	for _, f := range []string{"configmap.yaml", "statefulset.yaml", "service.yaml", "service-peers.yaml", "pdb.yaml"} {
		var o k8sObject
		if err := yaml.Unmarshal([]byte(read(t, filepath.Join("kubernetes/pooling", f))), &o); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if o.Metadata.Labels["app.kubernetes.io/name"] != "ttlproxy" {
			t.Errorf("%s: labels %v", f, o.Metadata.Labels)
		}
		objs[f] = o
	}
	sts, cm := objs["statefulset.yaml"], objs["configmap.yaml"]
	headless, lb := objs["service-peers.yaml"], objs["service.yaml"]
	if sts.Kind != "StatefulSet" || cm.Kind != "ConfigMap" || headless.Kind != "Service" || lb.Kind != "Service" {
		t.Fatalf("kinds: %s %s %s %s", sts.Kind, cm.Kind, headless.Kind, lb.Kind)
	}

	// The pods: their peer id is their ordinal, from 1.
	if sts.Spec.Ordinals.Start != 1 || sts.Spec.Replicas < 2 {
		t.Errorf("ordinals start at %d, %d replicas; want 1 and several", sts.Spec.Ordinals.Start, sts.Spec.Replicas)
	}
	if len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(sts.Spec.Template.Spec.Containers))
	}
	c := sts.Spec.Template.Spec.Containers[0]
	i := slices.Index(c.Args, "--peer-id")
	if i < 0 || i+1 >= len(c.Args) || !strings.HasPrefix(c.Args[i+1], "$(") {
		t.Fatalf("args %v lack --peer-id $(VAR)", c.Args)
	}
	peerVar := strings.TrimSuffix(strings.TrimPrefix(c.Args[i+1], "$("), ")")
	found := false
	for _, e := range c.Env {
		if e.Name == peerVar {
			found = e.ValueFrom.FieldRef.FieldPath == "metadata.labels['apps.kubernetes.io/pod-index']"
		}
	}
	if !found {
		t.Errorf("%s is not the pod-index label through the downward API: %+v", peerVar, c.Env)
	}
	podPorts := map[string]int{}
	for _, p := range c.Ports {
		podPorts[p.Name] = p.ContainerPort
	}
	labels := sts.Spec.Template.Metadata.Labels
	if ml, _ := sts.Spec.Selector["matchLabels"].(map[string]any); len(ml) == 0 || fmt.Sprint(ml) != fmt.Sprint(labels) {
		t.Errorf("the StatefulSet selects %v, its pods have %v", ml, labels)
	}

	// The configuration the pods read.
	var cfgFile string
	for _, m := range c.VolumeMounts {
		if rest, ok := strings.CutPrefix("/etc/ttlproxy/ttlproxy.yaml", m.MountPath+"/"); ok && m.Name == "config" {
			cfgFile = rest
		}
	}
	if i := slices.Index(c.Args, "--config"); i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "/etc/ttlproxy/ttlproxy.yaml" || cfgFile == "" {
		t.Errorf("args %v and mounts %+v: the configuration is not the ConfigMap's", c.Args, c.VolumeMounts)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "config" && v.ConfigMap.Name != cm.Metadata.Name {
			t.Errorf("the config volume is ConfigMap %q, the kit's is %q", v.ConfigMap.Name, cm.Metadata.Name)
		}
	}
	cfg, err := config.Parse([]byte(cm.Data[cfgFile]))
	if err != nil {
		t.Fatalf("kubernetes/pooling/configmap.yaml %s: %v", cfgFile, err)
	}
	if cfg.PoolMode != config.PoolModeTransaction || cfg.PeerID != 0 {
		t.Errorf("pool_mode %q, peer_id %d: want transaction, and the id from --peer-id", cfg.PoolMode, cfg.PeerID)
	}
	port := func(addr string) int {
		t.Helper()
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(p)
		return n
	}
	if port(cfg.Listen) != podPorts["postgres"] || port(cfg.AdminListen) != podPorts["admin"] {
		t.Errorf("listen %s, admin_listen %s; the pod's ports %v", cfg.Listen, cfg.AdminListen, podPorts)
	}
	if len(cfg.Peers) != sts.Spec.Replicas {
		t.Errorf("%d peers for %d replicas", len(cfg.Peers), sts.Spec.Replicas)
	}
	for i, p := range cfg.Peers {
		id := sts.Spec.Ordinals.Start + i
		host := fmt.Sprintf("%s-%d.%s", sts.Metadata.Name, id, headless.Metadata.Name)
		if p.ID != id || p.Host != host || p.Port != podPorts["postgres"] {
			t.Errorf("peers[%d] = %+v, want id %d at %s:%d", i, p, id, host, podPorts["postgres"])
		}
	}

	// The Services: the headless one names the pods, the other balances.
	if sts.Spec.ServiceName != headless.Metadata.Name || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %q; headless Service %q, clusterIP %q, publishNotReadyAddresses %v",
			sts.Spec.ServiceName, headless.Metadata.Name, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	if lb.Spec.ClusterIP == "None" || lb.Metadata.Name == headless.Metadata.Name {
		t.Errorf("the clients' Service %q must balance", lb.Metadata.Name)
	}
	for _, svc := range []k8sObject{headless, lb} {
		for k, v := range svc.Spec.Selector {
			if labels[k] != v.(string) {
				t.Errorf("Service %s selects %s=%s, the pods have %v", svc.Metadata.Name, k, v, labels)
			}
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := podPorts[p.TargetPort]; !ok {
				t.Errorf("Service %s port %s targets %q, which the pods do not name", svc.Metadata.Name, p.Name, p.TargetPort)
			}
		}
	}
}

// probe is a container's HTTP probe.
type probe struct {
	HTTPGet struct {
		Path   string `yaml:"path"`
		Port   string `yaml:"port"`
		Scheme string `yaml:"scheme"`
	} `yaml:"httpGet"`
}

// workload is the part of a Deployment or StatefulSet TestKubernetesImage
// reads.
type workload struct {
	Spec struct {
		Template struct {
			Spec struct {
				SecurityContext struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
					RunAsUser    int  `yaml:"runAsUser"`
					RunAsGroup   int  `yaml:"runAsGroup"`
				} `yaml:"securityContext"`
				Containers []struct {
					Args  []string `yaml:"args"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					ReadinessProbe  probe `yaml:"readinessProbe"`
					LivenessProbe   probe `yaml:"livenessProbe"`
					SecurityContext struct {
						AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
						ReadOnlyRootFilesystem   bool  `yaml:"readOnlyRootFilesystem"`
					} `yaml:"securityContext"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// TestKubernetesImage: both kits run the image as the Dockerfile builds it:
// as its user, on a read-only root filesystem (release/image.sh runs the
// proxy so), with the configuration file its HEALTHCHECK reads, and with a
// liveness probe that asks what the HEALTHCHECK asks: /healthz on the
// configuration's admin_listen port, which the image exposes, over HTTPS
// exactly when the web configuration serves TLS.
func TestKubernetesImage(t *testing.T) {
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	st, err := dockerfile.ParseRuntime(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	uid, gid, _ := strings.Cut(st.User, ":")
	hcConfig := st.Healthcheck.Test[slices.Index(st.Healthcheck.Test, "--config")+1]
	for _, kit := range []struct{ workload, configmap string }{
		{"kubernetes/deployment.yaml", "kubernetes/configmap.yaml"},
		{"kubernetes/pooling/statefulset.yaml", "kubernetes/pooling/configmap.yaml"},
	} {
		t.Run(kit.workload, func(t *testing.T) {
			var w workload
			var cm k8sObject
			if err := yaml.Unmarshal([]byte(read(t, kit.workload)), &w); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal([]byte(read(t, kit.configmap)), &cm); err != nil {
				t.Fatal(err)
			}
			pod := w.Spec.Template.Spec
			if !pod.SecurityContext.RunAsNonRoot || strconv.Itoa(pod.SecurityContext.RunAsUser) != uid ||
				strconv.Itoa(pod.SecurityContext.RunAsGroup) != gid {
				t.Errorf("pod securityContext %+v, the image's user %s", pod.SecurityContext, st.User)
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers", len(pod.Containers))
			}
			c := pod.Containers[0]
			if !c.SecurityContext.ReadOnlyRootFilesystem || c.SecurityContext.AllowPrivilegeEscalation == nil ||
				*c.SecurityContext.AllowPrivilegeEscalation {
				t.Errorf("container securityContext %+v: want a read-only root filesystem, no privilege escalation", c.SecurityContext)
			}
			if i := slices.Index(c.Args, "--config"); len(c.Args) == 0 || c.Args[0] != "serve" || i < 0 || c.Args[i+1] != hcConfig {
				t.Errorf("args %v: the image's HEALTHCHECK reads %s", c.Args, hcConfig)
			}
			cfg, err := config.Parse([]byte(cm.Data["ttlproxy.yaml"]))
			if err != nil {
				t.Fatal(err)
			}
			_, adminPort, _ := net.SplitHostPort(cfg.AdminListen)
			if !slices.Contains(st.Expose, adminPort) {
				t.Errorf("admin_listen %s: the image exposes %v", cfg.AdminListen, st.Expose)
			}
			ports := map[string]string{}
			for _, p := range c.Ports {
				ports[p.Name] = strconv.Itoa(p.ContainerPort)
			}
			scheme := "HTTP"
			if strings.Contains(cm.Data["web.yml"], "tls_server_config:") {
				scheme = "HTTPS"
			}
			for path, got := range map[string]struct{ Path, Port, Scheme string }{
				"/healthz": {c.LivenessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Port, c.LivenessProbe.HTTPGet.Scheme},
				"/readyz":  {c.ReadinessProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Port, c.ReadinessProbe.HTTPGet.Scheme},
			} {
				if got.Path != path || ports[got.Port] != adminPort || got.Scheme != scheme {
					t.Errorf("probe %+v (ports %v): want %s on the admin port %s over %s", got, ports, path, adminPort, scheme)
				}
			}
		})
	}
}

// TestComposeHealthcheck: the compose kit's health check for ttlproxy, which
// replaces the image's because its admin server asks for basic auth, asks
// /healthz on the admin port of the kit's configuration with a user and
// password that web.yml accepts.
func TestComposeHealthcheck(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "docker-compose.yaml")), &compose); err != nil {
		t.Fatal(err)
	}
	test := compose.Services["ttlproxy"].Healthcheck.Test
	i := slices.Index(test, "--url")
	if len(test) < 3 || test[0] != "CMD" || test[1] != "ttlproxy" || test[2] != "healthcheck" || i < 0 || i+1 >= len(test) {
		t.Fatalf("ttlproxy's health check %q: want CMD ttlproxy healthcheck --url URL", test)
	}
	u, err := url.Parse(test[i+1])
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(read(t, "ttlproxy.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	_, adminPort, _ := net.SplitHostPort(cfg.AdminListen)
	if u.Scheme != "http" || u.Port() != adminPort || u.Path != "/healthz" {
		t.Errorf("health check URL %s: want http (web.yml has no TLS) on port %s, /healthz", u.Redacted(), adminPort)
	}
	var web struct {
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "web.yml")), &web); err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	if err := bcrypt.CompareHashAndPassword([]byte(web.Users[u.User.Username()]), []byte(pw)); err != nil {
		t.Errorf("web.yml does not accept the health check's user %q: %v", u.User.Username(), err)
	}
}
