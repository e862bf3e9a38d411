// Command dockerstage reads the runtime stage of ttlproxy's Dockerfile and
// prints it as bash assignments for release/image.sh, which assembles the
// same image without a container engine: the Debian suite of the base
// image, the RUN commands, the binary's destination and the arguments of
// `buildah config`.
//
//	eval "$(go run ./release/dockerstage -build-arg VERSION=v1.2.3 Dockerfile)"
//
// Its tests check the Dockerfile itself and, when image.sh runs them, the
// image it built.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/ttlproxy/ttlproxy/internal/dockerfile"
)

// basePath is the PATH of Docker's official Debian images, which the
// Dockerfile's stage inherits from debian:SUITE-slim and image.sh's
// rootfs has to be given.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildArgs collects -build-arg NAME=VALUE.
type buildArgs map[string]string

func (b buildArgs) String() string { return fmt.Sprint(map[string]string(b)) }

func (b buildArgs) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("%q is not NAME=VALUE", s)
	}
	b[k] = v
	return nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dockerstage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ba := buildArgs{}
	fs.Var(ba, "build-arg", "`NAME=VALUE` as docker build --build-arg (repeatable)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: dockerstage [-build-arg NAME=VALUE]... Dockerfile")
		return 2
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(stderr, "dockerstage: %v\n", err)
		return 1
	}
	defer f.Close()
	st, err := dockerfile.ParseRuntime(f)
	if err == nil {
		err = printShell(stdout, st, ba)
	}
	if err != nil {
		fmt.Fprintf(stderr, "dockerstage: %s: %v\n", fs.Arg(0), err)
		return 1
	}
	return 0
}

// suite returns the Debian suite of a debian:SUITE-slim base image.
func suite(st *dockerfile.Stage) (string, error) {
	suite, ok := strings.CutPrefix(st.From, "debian:")
	suite, slim := strings.CutSuffix(suite, "-slim")
	if !ok || !slim || suite == "" || strings.ContainsAny(suite, ":@") {
		return "", fmt.Errorf("FROM %s: image.sh makes debian:SUITE-slim only (mmdebstrap --variant=minbase SUITE)", st.From)
	}
	return suite, nil
}

// binaryDest returns where the one COPY puts the binary of the build stage.
func binaryDest(st *dockerfile.Stage) (string, error) {
	if len(st.Copies) != 1 || st.Copies[0].From == "" {
		return "", fmt.Errorf("image.sh puts the binary CI built where the one COPY --from=build puts it; the stage has %v", st.Copies)
	}
	return st.Copies[0].Dest, nil
}

// configArgs returns the arguments of `buildah config` that give an image
// the stage's configuration, ARGs expanded with args.
func configArgs(st *dockerfile.Stage, args map[string]string) []string {
	out := []string{"--env", "PATH=" + basePath}
	if st.User != "" {
		out = append(out, "--user", st.User)
	}
	for _, p := range st.Expose {
		if !strings.Contains(p, "/") {
			p += "/tcp" // as docker build records it
		}
		out = append(out, "--port", p)
	}
	keys := make([]string, 0, len(st.Labels))
	for k := range st.Labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, "--label", k+"="+st.Expand(st.Labels[k], args))
	}
	if hc := st.Healthcheck; hc != nil {
		// buildah splits --healthcheck into words as the shell does.
		test := "CMD"
		for _, w := range hc.Test {
			test += " " + shellQuote(w)
		}
		out = append(out, "--healthcheck", test,
			"--healthcheck-interval", hc.Interval.String(),
			"--healthcheck-timeout", hc.Timeout.String(),
			"--healthcheck-start-period", hc.StartPeriod.String(),
			"--healthcheck-retries", strconv.Itoa(hc.Retries))
	}
	if st.Entrypoint != nil {
		out = append(out, "--entrypoint", jsonArray(st.Entrypoint))
	}
	if st.Cmd != nil {
		out = append(out, "--cmd", jsonArray(st.Cmd))
	}
	return out
}

func printShell(w io.Writer, st *dockerfile.Stage, args map[string]string) error {
	s, err := suite(st)
	if err != nil {
		return err
	}
	dest, err := binaryDest(st)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "suite=%s\n", shellQuote(s))
	fmt.Fprintf(w, "binary_dest=%s\n", shellQuote(dest))
	fmt.Fprintf(w, "base_path=%s\n", shellQuote(basePath))
	fmt.Fprintf(w, "runs=(%s)\n", shellWords(st.Runs))
	fmt.Fprintf(w, "config_args=(%s)\n", shellWords(configArgs(st, args)))
	return nil
}

func jsonArray(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// shellQuote quotes s for the shell: in single quotes, each single quote
// inside closed, escaped and reopened.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@%+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellWords(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = shellQuote(s)
	}
	return strings.Join(q, " ")
}
