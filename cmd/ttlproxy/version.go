package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = ""

// versionInfo describes the running binary.
type versionInfo struct {
	Version   string // the ldflags version, else the module version, else "devel"
	Module    string // main module path and version
	Revision  string // VCS commit, "" when not recorded
	Time      string // VCS commit time
	Modified  bool   // built from a modified tree
	GoVersion string
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
	}
	if v.Version == "" {
		v.Version = "devel"
	}
	return v
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
	return exitOK
}
