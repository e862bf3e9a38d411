// Command ttlproxy is a PostgreSQL wire-protocol proxy that gives tables
// row-level soft TTL: expired rows are hidden from every statement, writes
// are stamped with an expiry, and a sweeper deletes expired rows in the
// background.
//
// Usage:
//
//	ttlproxy serve --config ttlproxy.yaml
//	ttlproxy demo
//	ttlproxy rewrite --config ttlproxy.yaml "SELECT * FROM sessions"
//	ttlproxy install --config ttlproxy.yaml --dsn postgres://owner@db/app
//	ttlproxy import-pgbouncer pgbouncer.ini > ttlproxy.yaml
//	ttlproxy version
//	ttlproxy healthcheck --config ttlproxy.yaml
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// stdinReader is what `ttlproxy rewrite -` reads; tests replace it.
var stdinReader io.Reader = os.Stdin

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default handlers so that a
		// second Ctrl-C ends a shutdown that takes too long.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `ttlproxy: a PostgreSQL proxy with row-level soft TTL.

Usage:
  ttlproxy serve --config FILE [flags]   run the proxy, the sweeper and the admin HTTP server
  ttlproxy demo [flags]                  run everything against a throw-away local PostgreSQL
  ttlproxy rewrite --config FILE "SQL"   print the SQL the proxy would send, or why it is rejected
  ttlproxy install --config FILE --dsn URL
                                         add triggers that let writes take the unique keys of expired rows
                                         (--row-security: row-level security policies instead)
  ttlproxy check --config FILE [--dsn URL]
                                         check the configuration against the live database
  ttlproxy status [--admin URL]          print a running proxy's rules in force and sessions
  ttlproxy sweep --config FILE --once    delete the expired rows once and exit (cron, measurements)
  ttlproxy import-pgbouncer pgbouncer.ini [userlist.txt]
                                         translate a PgBouncer configuration into a ttlproxy one
  ttlproxy healthcheck [--config FILE]   exit 0 when a running proxy's admin server answers /healthz
  ttlproxy version                       print version information

Run "ttlproxy COMMAND -h" for the flags of a command.
`

// run executes one command line (without the program name) and returns the
// process exit code. ctx is cancelled on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
	case "rewrite":
		return runRewrite(rest, stdout, stderr)
	case "install":
		return runInstall(ctx, rest, stdout, stderr)
	case "status":
		return runStatus(ctx, rest, stdout, stderr)
	case "check":
		return runCheck(ctx, rest, stdout, stderr)
	case "sweep":
		return runSweep(ctx, rest, stdout, stderr)
	case "import-pgbouncer":
		return runImportPgBouncer(rest, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, rest, stdout, stderr)
	case "version":
		return runVersion(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "ttlproxy: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

// newFlagSet returns a FlagSet for a subcommand that reports errors instead
// of exiting.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ttlproxy "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ttlproxy %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and maps the outcome to an exit code: ok is false
// when the command must return code at once (-h, or a usage error already
// printed by the FlagSet).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK, false
	}
	if err != nil {
		return exitUsage, false
	}
	return exitOK, true
}

// usageError prints msg and the command's usage, and returns exitUsage.
func usageError(fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return exitUsage
}
