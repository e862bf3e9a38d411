package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/metricnames"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path) //nolint:gosec // a page of the manual, named by the test
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// compare reports what the code has and the page lacks, and the other way
// round.
func compare(t *testing.T, what, page string, code, documented []string) {
	t.Helper()
	for _, c := range code {
		if !slices.Contains(documented, c) {
			t.Errorf("%s %s is in the code but not in %s", what, c, page)
		}
	}
	for _, d := range documented {
		if !slices.Contains(code, d) {
			t.Errorf("%s %s is in %s but not in the code", what, d, page)
		}
	}
}

func sortedSet(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// parseDir parses the Go files of dir, tests excluded.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// configSections maps each function of package config that reads a mapping
// to the key path of that mapping ("" for the top level).
var configSections = map[string]string{
	"parseRoot":        "",
	"parseAdmin":       "admin",
	"parseTLS":         "tls",
	"parseUpstreamTLS": "upstream_tls",
	"parseUpstreamTCP": "upstream_tcp",
	"parseLimits":      "limits",
	"parseTable":       "tables[]",
	"parseTableColumn": "tables[].columns[]",
	"parseSweeper":     "sweeper",
	"parsePeers":       "peers[]",
}

// codeConfigKeys reads the configuration keys from package config: every
// call mapping(node, path, keys...) names the keys one mapping accepts,
// either as string literals or as the keys of a package-level table such
// as tableKeys. It returns the keys that hold a value and the keys that
// hold a mapping of their own.
func codeConfigKeys(t *testing.T) (leaves, sections []string) {
	t.Helper()
	files := parseDir(t, "../config")
	// Package-level tables of keys: var x = []struct{key ...}{{"k", ...}}.
	tables := map[string][]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, v := range vs.Values {
					cl, ok := v.(*ast.CompositeLit)
					if !ok {
						continue
					}
					for _, elt := range cl.Elts {
						if row, ok := elt.(*ast.CompositeLit); ok && len(row.Elts) > 0 {
							if s, ok := stringLit(row.Elts[0]); ok {
								tables[vs.Names[i].Name] = append(tables[vs.Names[i].Name], s)
							}
						}
					}
				}
			}
		}
	}
	var keys []string
	for _, f := range files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "mapping" {
					return true
				}
				prefix, ok := configSections[fd.Name.Name]
				if !ok {
					t.Errorf("config.%s reads a mapping: add its key path to configSections", fd.Name.Name)
					return true
				}
				if prefix != "" {
					prefix += "."
				}
				var names []string
				for _, a := range call.Args[2:] {
					if s, ok := stringLit(a); ok {
						names = append(names, s)
					}
				}
				if call.Ellipsis.IsValid() {
					// mapping(v, path, known...): known is built by ranging
					// over a table of keys in the same function.
					ast.Inspect(fd.Body, func(n ast.Node) bool {
						if r, ok := n.(*ast.RangeStmt); ok {
							if id, ok := r.X.(*ast.Ident); ok {
								names = append(names, tables[id.Name]...)
							}
						}
						return true
					})
				}
				if len(names) == 0 {
					t.Errorf("config.%s: cannot read the keys of its mapping", fd.Name.Name)
				}
				for _, k := range names {
					keys = append(keys, prefix+k)
				}
				return true
			})
		}
	}
	for _, p := range configSections {
		if p != "" {
			sections = append(sections, p)
		}
	}
	for _, k := range keys {
		if !slices.Contains(sections, strings.TrimSuffix(k, "[]")) && !slices.Contains(sections, k+"[]") {
			leaves = append(leaves, k)
		}
	}
	return sortedSet(leaves), sortedSet(sections)
}

var (
	sectionHeading = regexp.MustCompile("^### (?:Top level|`([a-z_.\\[\\]]+)`)")
	tableRow       = regexp.MustCompile(`^\| ([^|]+) \|`)
	backticked     = regexp.MustCompile("`([^`]+)`")
)

// docConfigKeys reads the keys of configuration.md's tables: the first
// cell of each row, under the heading of its section.
func docConfigKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	prefix, inSection := "", false
	for _, line := range strings.Split(read(t, "configuration.md"), "\n") {
		if strings.HasPrefix(line, "#") {
			m := sectionHeading.FindStringSubmatch(line)
			inSection = m != nil
			prefix = ""
			if m != nil && m[1] != "" {
				prefix = m[1] + "."
			}
			continue
		}
		m := tableRow.FindStringSubmatch(line)
		if !inSection || m == nil || strings.TrimSpace(m[1]) == "key" {
			continue
		}
		for _, k := range backticked.FindAllStringSubmatch(m[1], -1) {
			keys = append(keys, prefix+k[1])
		}
	}
	return sortedSet(keys)
}

// TestConfigKeys: every key the configuration file accepts is in
// configuration.md, and every key there is one it accepts.
func TestConfigKeys(t *testing.T) {
	leaves, sections := codeConfigKeys(t)
	if len(leaves) < 40 {
		t.Fatalf("read only %d keys from package config: %v", len(leaves), leaves)
	}
	documented := docConfigKeys(t)
	// A section may have a row of its own (tables, sweeper) or only rows
	// for its keys (tls.cert_file, limits.max_message_bytes).
	documented = slices.DeleteFunc(documented, func(k string) bool {
		return slices.Contains(sections, k) || slices.Contains(sections, k+"[]")
	})
	compare(t, "configuration key", "docs/configuration.md", leaves, documented)
}

var metricName = regexp.MustCompile(`ttlproxy_[a-z_]+`)

// TestMetrics: every metric ttlproxy registers has a row in the metrics
// table of operations.md, and every metric the manual names anywhere is
// registered.
func TestMetrics(t *testing.T) {
	code, err := metricnames.Registered("../cmd/ttlproxy")
	if err != nil {
		t.Fatal(err)
	}
	if len(code) < 20 {
		t.Fatalf("found only %d metrics in the code: %v", len(code), code)
	}
	var rows []string
	for _, line := range strings.Split(read(t, "operations.md"), "\n") {
		if m := tableRow.FindStringSubmatch(line); m != nil && metricName.MatchString(m[1]) {
			rows = append(rows, strings.Trim(strings.TrimSpace(m[1]), "`"))
		}
	}
	compare(t, "metric", "the metrics table of docs/operations.md", code, sortedSet(rows))

	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	// Names that start as a registered metric does (ttlproxy_proxy_…,
	// ttlproxy_sweeper_…) are metrics; others (ttlproxy_live, a policy) are not.
	var subsystems []string
	for _, m := range code {
		sub, _, _ := strings.Cut(strings.TrimPrefix(m, "ttlproxy_"), "_")
		subsystems = append(subsystems, "ttlproxy_"+sub+"_")
	}
	for _, page := range append(pages, "../README.md", "../ARCHITECTURE.md") {
		for _, m := range metricName.FindAllString(read(t, page), -1) {
			if !slices.ContainsFunc(subsystems, func(p string) bool { return strings.HasPrefix(m, p) }) {
				continue
			}
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m, suffix); ok && strings.HasSuffix(base, "_seconds") {
					m = base
				}
			}
			if !slices.Contains(code, m) && !strings.HasSuffix(m, "_") { // a prefix: ttlproxy_proxy_
				t.Errorf("%s names %s, which ttlproxy does not register", page, m)
			}
		}
	}
}

// codeSubcommands reads the subcommands from the switch of cmd/ttlproxy's
// run function; help and its flag spellings are not subcommands.
func codeSubcommands(t *testing.T) []string {
	t.Helper()
	var cmds []string
	for _, f := range parseDir(t, "../cmd/ttlproxy") {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Name.Name != "run" || fd.Recv != nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				cc, ok := n.(*ast.CaseClause)
				if !ok {
					return true
				}
				for _, e := range cc.List {
					if s, ok := stringLit(e); ok && s != "help" && !strings.HasPrefix(s, "-") {
						cmds = append(cmds, s)
					}
				}
				return true
			})
		}
	}
	if len(cmds) < 5 {
		t.Fatalf("read only %d subcommands from cmd/ttlproxy's run: %v", len(cmds), cmds)
	}
	return sortedSet(cmds)
}

var commandRow = regexp.MustCompile("^\\| `ttlproxy ([a-z]+(?:-[a-z]+)*)")

// TestSubcommands: every subcommand of ttlproxy has a row in commands.md,
// and every row there is a subcommand.
func TestSubcommands(t *testing.T) {
	var documented []string
	for _, line := range strings.Split(read(t, "commands.md"), "\n") {
		if m := commandRow.FindStringSubmatch(line); m != nil {
			documented = append(documented, m[1])
		}
	}
	compare(t, "subcommand", "docs/commands.md", codeSubcommands(t), sortedSet(documented))
}

// goList returns the module's packages (relative to the module root) and,
// for each, the module packages its non-test files import.
func goList(t *testing.T) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...") //nolint:gosec // the go command, from PATH
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/ttlproxy/ttlproxy/"
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		graph[pkg] = []string{}
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				graph[pkg] = append(graph[pkg], rel)
			}
		}
		slices.Sort(graph[pkg])
	}
	return graph
}

// TestArchitecture: ARCHITECTURE.md's import graph is go list's, and its
// table of packages has a row for every package.
func TestArchitecture(t *testing.T) {
	arch := read(t, "../ARCHITECTURE.md")
	graph := goList(t)

	_, after, ok := strings.Cut(arch, "How the packages import one another")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no import graph")
	}
	_, block, _ := strings.Cut(after, "```\n")
	block, _, _ = strings.Cut(block, "```")
	documented := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		var from, to string
		switch {
		case strings.Contains(line, "▶"):
			from, to, _ = strings.Cut(line, "▶")
			from = strings.TrimRight(from, "─ ")
		case strings.Contains(line, ":"):
			from, _, _ = strings.Cut(line, ":") // imports no package of the module
		default:
			t.Errorf("ARCHITECTURE.md: cannot read the import graph's line %q", line)
			continue
		}
		var imports []string
		for _, p := range strings.Split(to, ",") {
			if p = strings.TrimSpace(p); p != "" {
				imports = append(imports, p)
			}
		}
		slices.Sort(imports)
		for _, p := range strings.Split(from, ",") {
			documented[strings.TrimSpace(p)] = append([]string{}, imports...)
		}
	}
	for pkg, imports := range graph {
		doc, ok := documented[pkg]
		switch {
		case !ok:
			t.Errorf("ARCHITECTURE.md's import graph lacks the package %s (it imports %v)", pkg, imports)
		case !slices.Equal(doc, imports):
			t.Errorf("ARCHITECTURE.md: %s imports %v, go list says %v", pkg, doc, imports)
		}
	}
	for pkg := range documented {
		if _, ok := graph[pkg]; !ok {
			t.Errorf("ARCHITECTURE.md's import graph names %s, which go list does not", pkg)
		}
	}

	checkLayers(t, arch, graph)

	rows := map[string]bool{}
	for _, line := range strings.Split(arch, "\n") {
		if m := tableRow.FindStringSubmatch(line); m != nil {
			for _, p := range backticked.FindAllStringSubmatch(m[1], -1) {
				rows[p[1]] = true
			}
		}
	}
	for pkg := range graph {
		if !rows[pkg] {
			t.Errorf("ARCHITECTURE.md's table of packages has no row for %s", pkg)
		}
	}
}

// checkLayers: ARCHITECTURE.md's list of the proxy's layers (a number and
// the packages of that layer, from the top down) names every package under
// proxy/ and internal/wire, and every import between two listed packages
// points to a lower layer: a package that imports one above it or beside it
// fails.
func checkLayers(t *testing.T, arch string, graph map[string][]string) {
	t.Helper()
	_, after, ok := strings.Cut(arch, "The proxy is built in layers")
	if !ok {
		t.Fatal("ARCHITECTURE.md has no list of the proxy's layers")
	}
	_, block, _ := strings.Cut(after, "```\n")
	block, _, _ = strings.Cut(block, "```")
	layer := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		num, pkgs, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, err := strconv.Atoi(num)
		if err != nil {
			t.Errorf("ARCHITECTURE.md: cannot read the layers' line %q", line)
			continue
		}
		for _, p := range strings.Split(pkgs, ",") {
			layer[strings.TrimSpace(p)] = n
		}
	}
	for pkg, imports := range graph {
		if (pkg == "proxy" || strings.HasPrefix(pkg, "proxy/") || pkg == "internal/wire") && layer[pkg] == 0 {
			t.Errorf("ARCHITECTURE.md's layers do not place %s", pkg)
		}
		from, ok := layer[pkg]
		if !ok {
			continue
		}
		for _, imp := range imports {
			if to, ok := layer[imp]; ok && to >= from {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports point down only", pkg, from, imp, to)
			}
		}
	}
	for pkg := range layer {
		if _, ok := graph[pkg]; !ok {
			t.Errorf("ARCHITECTURE.md's layers name %s, which go list does not", pkg)
		}
	}
}
