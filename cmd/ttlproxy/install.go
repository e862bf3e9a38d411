package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/install"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// runInstall adds (or removes) the helper triggers of package install on the
// configured TTL tables, or with --row-security the row-level security
// policies, with --ddl-events the DDL event triggers, with --auth-query the
// auth query function, in one transaction, and prints what it ran.
func runInstall(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("install", "--config FILE --dsn URL [--row-security | --ddl-events] [--uninstall] [--dry-run]\n  ttlproxy install --dsn URL --auth-query --auth-user LOGIN [--uninstall] [--dry-run]", stderr)
	configPath := fs.String("config", "", "configuration `file` (required, but for --auth-query)")
	dsn := fs.String("dsn", "", "connection `string` of a role that owns the TTL tables (required; the password may come from PGPASSWORD or ~/.pgpass)")
	rowSecurity := fs.Bool("row-security", false, "install row-level security policies that hide expired rows inside the database instead of the collision triggers (the sweeper's login, bypass_roles and the --dsn login see every row)")
	ddlEvents := fs.Bool("ddl-events", false, "install the event triggers that tell running proxies about DDL at once, instead of the collision triggers (needs a superuser; in every database the proxy serves)")
	authQuery := fs.Bool("auth-query", false, "install the function ttlproxy.user_lookup that the proxy's auth_query calls to read password verifiers, instead of the collision triggers (needs a superuser; in the auth_dsn's database; --config is not read)")
	authUser := fs.String("auth-user", "", "the `login` granted EXECUTE on the auth query function: the auth_dsn's user, a dedicated role that is not a superuser (required with --auth-query)")
	uninstall := fs.Bool("uninstall", false, "remove what the command installs instead")
	dryRun := fs.Bool("dry-run", false, "print the statements without running them")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	if *dsn == "" {
		return usageError(fs, "--dsn is required")
	}
	if *rowSecurity && *ddlEvents {
		return usageError(fs, "--row-security and --ddl-events install different things: run the command once for each")
	}
	if *authQuery && (*rowSecurity || *ddlEvents) {
		return usageError(fs, "--auth-query and --row-security or --ddl-events install different things: run the command once for each")
	}
	if *authUser != "" && !*authQuery {
		return usageError(fs, "--auth-user goes with --auth-query")
	}
	if *authQuery {
		if *authUser == "" && !*uninstall {
			return usageError(fs, "--auth-query needs --auth-user, the login of the proxy's auth_dsn")
		}
		return installAuthQuery(ctx, *dsn, *authUser, *uninstall, *dryRun, stdout, stderr)
	}
	if *configPath == "" {
		return usageError(fs, "--config is required")
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy install: %v\n", err)
		return exitFailure
	}
	if len(cfg.Tables) == 0 && !*ddlEvents {
		fmt.Fprintln(stderr, "ttlproxy install: the configuration has no tables")
		return exitFailure
	}
	conn, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		// pgconn's errors name the host and user, never the password.
		fmt.Fprintf(stderr, "ttlproxy install: connecting: %v\n", err)
		return exitFailure
	}
	defer conn.Close(context.WithoutCancel(ctx))

	apply := install.Apply
	if *dryRun {
		apply = install.Preview
	}
	if *rowSecurity {
		exempt := slices.Clone(cfg.BypassRoles)
		if cfg.Sweeper != nil {
			sc, err := pgx.ParseConfig(cfg.Sweeper.DSN)
			if err != nil {
				fmt.Fprintf(stderr, "ttlproxy install: sweeper.dsn: %v\n", err)
				return exitFailure
			}
			exempt = append(exempt, sc.User)
		}
		apply = func(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule, uninstall bool) ([]string, error) {
			if *dryRun {
				return install.PreviewRowSecurity(ctx, conn, rules, exempt, uninstall)
			}
			return install.ApplyRowSecurity(ctx, conn, rules, exempt, uninstall)
		}
	}
	if *ddlEvents {
		apply = func(ctx context.Context, conn *pgx.Conn, _ []ttl.Rule, uninstall bool) ([]string, error) {
			if *dryRun {
				return install.PreviewDDLEvents(ctx, conn, uninstall)
			}
			return install.ApplyDDLEvents(ctx, conn, uninstall)
		}
	}
	done, err := apply(ctx, conn, cfg.Tables, *uninstall)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy install: %v\n", err)
		return exitFailure
	}
	printInstalled(stdout, done, *dryRun)
	return exitOK
}

// installAuthQuery runs install --auth-query.
func installAuthQuery(ctx context.Context, dsn, authUser string, uninstall, dryRun bool, stdout, stderr io.Writer) int {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy install: connecting: %v\n", err)
		return exitFailure
	}
	defer conn.Close(context.WithoutCancel(ctx))
	apply := install.ApplyAuthQuery
	if dryRun {
		apply = install.PreviewAuthQuery
	}
	done, err := apply(ctx, conn, authUser, uninstall)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy install: %v\n", err)
		return exitFailure
	}
	printInstalled(stdout, done, dryRun)
	return exitOK
}

// printInstalled prints the statements run, each with its semicolon, and
// the comment lines among them as they are.
func printInstalled(stdout io.Writer, done []string, dryRun bool) {
	for _, s := range done {
		if strings.HasPrefix(s, "-- ") {
			fmt.Fprintln(stdout, s)
		} else {
			fmt.Fprintln(stdout, s+";")
		}
	}
	if dryRun {
		fmt.Fprintln(stdout, "-- dry run: nothing was changed")
	}
}
