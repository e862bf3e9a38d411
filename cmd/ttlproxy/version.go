package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = ""

// pgQueryModule is the module of the SQL parser, whose version the build
// information records.
const pgQueryModule = "github.com/pganalyze/pg_query_go/v6"

// versionInfo describes the running binary.
type versionInfo struct {
	Version   string // the ldflags version, else the module version, else "devel"
	Module    string // main module path and version
	Revision  string // VCS commit, "" when not recorded
	Time      string // VCS commit time
	Modified  bool   // built from a modified tree
	GoVersion string
	// Parser is the pg_query_go module version, "" when not recorded.
	Parser string
}

func readVersion() versionInfo {
	v := versionInfo{Version: version, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		v.Module = bi.Main.Path
		if bi.Main.Version != "" {
			v.Module += " " + bi.Main.Version
		}
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		v.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
		for _, d := range bi.Deps {
			if d.Path == pgQueryModule {
				v.Parser = d.Version
				if d.Replace != nil {
					v.Parser = d.Replace.Path + " " + d.Replace.Version
				}
			}
		}
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
}

// grammarVersion returns the PostgreSQL version whose grammar the parser
// compiles in (libpg_query's PG_VERSION_NUM, which every parse result
// carries), as "17.7 (170007)".
func grammarVersion() (string, error) {
	res, err := pg_query.Parse("SELECT 1")
	if err != nil {
		return "", err
	}
	n := res.GetVersion()
	// PostgreSQL 10 and later number versions major*10000 + minor.
	return fmt.Sprintf("%d.%d (%d)", n/10000, n%10000, n), nil
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "", stderr)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	v := readVersion()
	fmt.Fprintf(stdout, "ttlproxy %s\n", v.Version)
	if v.Module != "" {
		fmt.Fprintf(stdout, "module:  %s\n", v.Module)
	}
	if v.Revision != "" {
		rev := v.Revision
		if v.Time != "" {
			rev += " (" + v.Time + ")"
		}
		if v.Modified {
			rev += " modified"
		}
		fmt.Fprintf(stdout, "commit:  %s\n", rev)
	}
	fmt.Fprintf(stdout, "go:      %s\n", v.GoVersion)
	grammar, err := grammarVersion()
	if err != nil {
		// A parser that cannot parse SELECT 1 is a broken build.
		fmt.Fprintf(stderr, "ttlproxy version: the SQL parser: %v\n", err)
		return exitFailure
	}
	parser := "pg_query_go"
	if v.Parser != "" {
		parser += " " + v.Parser
	}
	fmt.Fprintf(stdout, "parser:  %s, PostgreSQL %s grammar\n", parser, grammar)
	return exitOK
}
