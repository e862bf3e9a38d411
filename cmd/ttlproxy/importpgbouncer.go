package main

import (
	"fmt"
	"io"
	"os"

	"github.com/ttlproxy/ttlproxy/config"
)

// runImportPgBouncer implements `ttlproxy import-pgbouncer`: it translates a
// PgBouncer configuration (pgbouncer.ini and, optionally, the userlist.txt
// to use as auth_file) into a ttlproxy configuration file, written to
// stdout or to -o FILE (never over an existing file). The settings not
// carried over are listed at the end of the file and counted on stderr.
func runImportPgBouncer(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("import-pgbouncer", "[-o ttlproxy.yaml] pgbouncer.ini [userlist.txt]", stderr)
	out := fs.String("o", "", "write the configuration to this new file instead of stdout")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return usageError(fs, "want pgbouncer.ini and, optionally, userlist.txt")
	}
	userlist := fs.Arg(1)
	if userlist != "" {
		if _, err := os.Stat(userlist); err != nil {
			fmt.Fprintf(stderr, "ttlproxy import-pgbouncer: %v\n", err)
			return exitFailure
		}
	}
	im, err := config.ImportPgBouncer(fs.Arg(0), userlist)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy import-pgbouncer: %v\n", err)
		return exitFailure
	}
	if *out == "" {
		if _, err := stdout.Write(im.YAML); err != nil {
			return exitFailure
		}
	} else {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.Write(im.YAML)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "ttlproxy import-pgbouncer: %v\n", err)
			return exitFailure
		}
	}
	if n := len(im.Skipped); n > 0 {
		fmt.Fprintf(stderr, "ttlproxy import-pgbouncer: %d settings not carried over, listed at the end of the file with why:\n", n)
		for _, s := range im.Skipped {
			fmt.Fprintf(stderr, "  %s\n", s)
		}
	}
	return exitOK
}
