// Package metricnames lists the metrics ttlproxy registers, read from the
// code itself, so that the tests of the deployment kit (package deploy) and
// of the manual (package docs) compare against the code, not a copy of it.
package metricnames

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/sweeper"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// recorder keeps the collectors registered through it.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([a-z_:]+)"`)

// Registered returns, sorted, the names of the metrics a proxy and a sweeper
// register, and of those the command registers itself, which are read from
// the Go source of cmdDir (cmd/ttlproxy: package main cannot be imported).
func Registered(cmdDir string) ([]string, error) {
	rec := &recorder{Registerer: prometheus.NewRegistry()}
	rw, err := rewrite.New([]ttl.Rule{{Table: "sessions"}}, rewrite.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := proxy.New(proxy.Config{Upstream: "127.0.0.1:1", Rewriter: rw, Registerer: rec}); err != nil {
		return nil, err
	}
	sw, err := sweeper.New(sweeper.Config{DSN: "postgres://x@127.0.0.1:1/x", Rules: []ttl.Rule{{Table: "sessions"}}, Registerer: rec})
	if err != nil {
		return nil, err
	}
	sw.Stop()
	names, err := commandMetrics(cmdDir)
	if err != nil {
		return nil, err
	}
	for _, c := range rec.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fqName.FindStringSubmatch(d.String()); m != nil {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// commandMetrics reads the metric names of the Go files of dir (tests
// excluded): the string given as Name in a composite literal (the Opts
// structs), and prometheus.BuildFQName called with literal arguments.
func commandMetrics(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, err
		}
		var bad error
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Name" {
					if s, ok := stringLit(n.Value); ok && strings.HasPrefix(s, "ttlproxy_") {
						names = append(names, s)
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "BuildFQName" {
					return true
				}
				var parts []string
				for _, a := range n.Args {
					s, ok := stringLit(a)
					if !ok {
						bad = fmt.Errorf("%s: BuildFQName with an argument that is not a literal", fset.Position(n.Pos()))
						return false
					}
					if s != "" {
						parts = append(parts, s)
					}
				}
				names = append(names, strings.Join(parts, "_"))
			}
			return true
		})
		if bad != nil {
			return nil, bad
		}
	}
	return names, nil
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
