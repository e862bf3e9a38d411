package dockerfile

import (
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/config"
)

const sample = `# syntax=docker/dockerfile:1
FROM golang:1 AS build
RUN go build -o /out/x .

FROM debian:bookworm-slim
ARG VERSION="dev"
# a comment
RUN apt-get update \
    # inside a continuation
    && apt-get install -y ca-certificates
COPY --from=build /out/x /usr/local/bin/x
user 10001:10001
LABEL a="b c" d=e\ f 'g'='h'
LABEL v="${VERSION}-$VERSION"
EXPOSE 1 2/udp
HEALTHCHECK --interval=5s --retries=2 CMD ["x", "healthcheck"]
ENTRYPOINT ["x"]
CMD ["serve", "--config", "/etc/x.yaml"]
`

func TestParseRuntime(t *testing.T) {
	st, err := ParseRuntime(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := &Stage{
		From:   "debian:bookworm-slim",
		Args:   map[string]string{"VERSION": "dev"},
		Runs:   []string{"apt-get update && apt-get install -y ca-certificates"},
		Copies: []Copy{{From: "build", Src: "/out/x", Dest: "/usr/local/bin/x"}},
		User:   "10001:10001",
		Labels: map[string]string{"a": "b c", "d": "e f", "g": "h", "v": "${VERSION}-$VERSION"},
		Expose: []string{"1", "2/udp"},
		Healthcheck: &Healthcheck{Test: []string{"x", "healthcheck"}, Interval: 5 * time.Second,
			Timeout: 30 * time.Second, Retries: 2},
		Entrypoint: []string{"x"},
		Cmd:        []string{"serve", "--config", "/etc/x.yaml"},
	}
	if got, w := strings.ReplaceAll(fmtStage(st), "\n", " "), strings.ReplaceAll(fmtStage(want), "\n", " "); got != w {
		t.Errorf("got  %s\nwant %s", got, w)
	}
	if got := st.Expand(st.Labels["v"], nil); got != "dev-dev" {
		t.Errorf("Expand with the default = %q", got)
	}
	if got := st.Expand(st.Labels["v"], map[string]string{"VERSION": "v1"}); got != "v1-v1" {
		t.Errorf("Expand with an argument = %q", got)
	}
}

func fmtStage(st *Stage) string {
	var b strings.Builder
	hc := *st.Healthcheck
	b.WriteString(strings.Join([]string{st.From, st.User, strings.Join(st.Runs, "|"), strings.Join(st.Expose, ","),
		strings.Join(st.Entrypoint, ","), strings.Join(st.Cmd, ","), strings.Join(hc.Test, ","),
		hc.Interval.String(), hc.Timeout.String(), hc.StartPeriod.String(), string(rune('0' + hc.Retries))}, "\n"))
	for _, m := range []map[string]string{st.Args, st.Labels} {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b.WriteString("\n" + k + "=" + m[k])
		}
	}
	for _, c := range st.Copies {
		b.WriteString("\n" + c.From + ":" + c.Src + ">" + c.Dest)
	}
	return b.String()
}

// TestParseRuntimeRefuses: what image.sh does not assemble is an error
// naming the line, not an instruction left out.
func TestParseRuntimeRefuses(t *testing.T) {
	for _, tc := range []struct{ name, stage, want string }{
		{"ENV", "ENV TZ=UTC", "line 2: ENV: not assembled"},
		{"WORKDIR", "WORKDIR /x", "WORKDIR: not assembled"},
		{"shell-form ENTRYPOINT", "ENTRYPOINT ttlproxy serve", "exec form"},
		{"shell-form CMD", "CMD serve", "exec form"},
		{"shell-form HEALTHCHECK", "HEALTHCHECK CMD ttlproxy healthcheck", "exec form"},
		{"HEALTHCHECK NONE", "HEALTHCHECK NONE", "want CMD"},
		{"RUN --mount", "RUN --mount=type=cache,target=/x true", "not assembled"},
		{"exec-form RUN", `RUN ["true"]`, "exec form"},
		{"COPY --chown", "COPY --chown=1 a /b", "--chown"},
		{"unterminated quote", `LABEL a="b`, "unterminated"},
		{"continuation at the end", `RUN true \`, "continuation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRuntime(strings.NewReader("FROM debian:bookworm-slim\n" + tc.stage + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func readStage(t *testing.T) *Stage {
	t.Helper()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := ParseRuntime(f)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return st
}

// TestDockerfile: the runtime stage of the repository's Dockerfile keeps
// what issue 36 asked of it: CA certificates and time zones, a fixed
// numeric non-root user that its RUN creates, the binary on the base
// image's PATH as the entrypoint, a health check by the binary on the
// configuration the command serves, the default ports, and the OCI labels
// agreeing with go.mod and LICENSE.
func TestDockerfile(t *testing.T) {
	st := readStage(t)
	run := strings.Join(st.Runs, " && ")
	install := regexp.MustCompile(`apt-get install -y --no-install-recommends ([a-z0-9 .+-]+?)(?: &&|$)`).FindStringSubmatch(run)
	if install == nil {
		t.Fatalf("no apt-get install in %q", run)
	}
	pkgs := strings.Fields(install[1])
	for _, p := range []string{"ca-certificates", "tzdata"} {
		if !slices.Contains(pkgs, p) {
			t.Errorf("the runtime stage installs %v, not %s", pkgs, p)
		}
	}
	if !strings.Contains(run, "rm -rf /var/lib/apt/lists/*") {
		t.Errorf("the package lists stay in the image: %q", run)
	}

	uid, gid, ok := strings.Cut(st.User, ":")
	if !ok || !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(uid) || !regexp.MustCompile(`^[1-9][0-9]*$`).MatchString(gid) {
		t.Errorf("USER %q: want a numeric non-root uid:gid (runAsNonRoot checks a numeric user only)", st.User)
	}
	if !strings.Contains(run, "groupadd --system --gid "+gid+" ") || !regexp.MustCompile(`useradd [^&]*--uid `+uid+` --gid `+gid+` `).MatchString(run) {
		t.Errorf("the RUN does not create uid %s, gid %s: %q", uid, gid, run)
	}

	if len(st.Copies) != 1 || st.Copies[0].From != "build" {
		t.Fatalf("COPY: %+v, want the build stage's binary", st.Copies)
	}
	dest := st.Copies[0].Dest
	if len(st.Entrypoint) != 1 || "/usr/local/bin/"+st.Entrypoint[0] != dest {
		t.Errorf("ENTRYPOINT %v, the binary at %s: want its name, found on the base image's PATH in /usr/local/bin", st.Entrypoint, dest)
	}
	cfg := slices.Index(st.Cmd, "--config")
	if len(st.Cmd) < 3 || st.Cmd[0] != "serve" || cfg < 0 || cfg+1 >= len(st.Cmd) {
		t.Fatalf("CMD %v: want serve --config FILE", st.Cmd)
	}
	cfgFile := st.Cmd[cfg+1]
	if !strings.Contains(run, "mkdir -p "+cfgFile[:strings.LastIndex(cfgFile, "/")]) {
		t.Errorf("the RUN does not make the configuration's directory of %s", cfgFile)
	}
	hc := st.Healthcheck
	if hc == nil {
		t.Fatal("no HEALTHCHECK")
	}
	if want := append(slices.Clone(st.Entrypoint), "healthcheck", "--config", cfgFile); !slices.Equal(hc.Test, want) {
		t.Errorf("HEALTHCHECK %v, want %v: the binary on the file CMD serves", hc.Test, want)
	}
	if hc.Timeout > hc.Interval || hc.StartPeriod == 0 {
		t.Errorf("HEALTHCHECK timeout %s, interval %s, start period %s", hc.Timeout, hc.Interval, hc.StartPeriod)
	}

	for _, addr := range []string{config.DefaultListen, config.DefaultAdminListen} {
		_, port, _ := net.SplitHostPort(addr)
		if !slices.Contains(st.Expose, port) {
			t.Errorf("EXPOSE %v lacks %s, the port of the default %s", st.Expose, port, addr)
		}
	}

	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	module := regexp.MustCompile(`(?m)^module (\S+)$`).FindSubmatch(gomod)
	license, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(license[:200])), " "), "Apache License Version 2.0") {
		t.Fatalf("LICENSE is not Apache 2.0: update the licenses label and this test")
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://" + string(module[1]),
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.version":  "${VERSION}",
		"org.opencontainers.image.title":    "ttlproxy",
	} {
		if st.Labels[k] != want {
			t.Errorf("LABEL %s=%q, want %q", k, st.Labels[k], want)
		}
	}
	if _, ok := st.Args["VERSION"]; !ok {
		t.Error("the runtime stage does not declare ARG VERSION, which its version label uses")
	}
}
