package tests

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/ttl"
)

var psqlAll = flag.Bool("psql.all", false, "TestPsqlTransparency: run every script of the corpus, not the default selection")

// TestPsqlTransparency runs PostgreSQL's own regression scripts with psql,
// once directly and once through the proxy (each in a fresh database), and
// requires identical output: statements that touch no TTL table must behave
// exactly as on a bare server, errors, notices and COPY included.
func TestPsqlTransparency(t *testing.T) {
	psql := pgTool(t, "psql")
	dir := corpusDir(t)
	// Scripts whose output is the same in any two runs. Over the whole corpus
	// (-psql.all) two differ between runs whatever the route: alter_table
	// prints OIDs, and triggers attributes an asynchronous NOTICE during COPY
	// to a psql line that depends on how packets happen to coalesce.
	scripts := []string{"aggregates.sql", "arrays.sql", "boolean.sql", "case.sql", "char.sql",
		"copydml.sql", "copyselect.sql", "create_view.sql", "delete.sql", "errors.sql", "float4.sql",
		"float8.sql", "insert.sql", "insert_conflict.sql", "int2.sql", "int4.sql", "int8.sql", "join.sql",
		"limit.sql", "merge.sql", "numeric.sql", "portals.sql", "prepare.sql", "returning.sql",
		"rowtypes.sql", "select.sql", "select_distinct.sql", "select_having.sql", "select_implicit.sql",
		"strings.sql", "subselect.sql", "text.sql", "transactions.sql", "union.sql", "update.sql",
		"varchar.sql", "window.sql", "with.sql"}
	if *psqlAll {
		all, err := filepath.Glob(filepath.Join(dir, "*.sql"))
		if err != nil {
			t.Fatal(err)
		}
		scripts = scripts[:0]
		for _, p := range all {
			scripts = append(scripts, filepath.Base(p))
		}
	}
	// A TTL rule is configured, but for a table the scripts never name.
	rules := []ttl.Rule{{Table: "ttl_only_here", DefaultTTL: time.Hour}}
	for _, name := range scripts {
		t.Run(strings.TrimSuffix(name, ".sql"), func(t *testing.T) {
			path := filepath.Join(dir, name)
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("corpus script missing: %v", err)
			}
			run := func(via string) string {
				s := newStack(t, stackOptions{rules: rules})
				addr := pgtestAddr(t)
				if via == "proxy" {
					addr = s.proxyAdr
				}
				out, _ := runTool(t, withTimeout(t, 2*time.Minute), psql, addr, "-X", "-a", "-q",
					"-v", "VERBOSITY=default", "-d", s.db, "-f", path)
				return strings.ReplaceAll(out, s.db, "<db>")
			}
			direct, proxied := run("direct"), run("proxy")
			if direct != proxied {
				t.Fatalf("psql output differs through the proxy:\n%s", firstDiff(direct, proxied))
			}
			if len(direct) < 100 {
				t.Fatalf("suspiciously short psql output: %q", direct)
			}
		})
	}
}

// TestPsqlThroughProxyHidesExpired drives the proxy with psql.
func TestPsqlThroughProxyHidesExpired(t *testing.T) {
	psql := pgTool(t, "psql")
	s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{sessionsRule}})
	out, err := runTool(t, withTimeout(t, time.Minute), psql, s.proxyAdr, "-X", "-A", "-t", "-d", s.db,
		"-c", "SELECT string_agg(note, ',' ORDER BY id) FROM sessions",
		"-c", "INSERT INTO sessions (id, owner, note) VALUES (7, 1, 'via psql')",
		"-c", "SELECT count(*) FROM sessions")
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	if want := "live,forever\nINSERT 0 1\n3\n"; out != want {
		t.Fatalf("psql output %q, want %q", out, want)
	}
}

func pgtestAddr(t *testing.T) string { return pgtest.Server(t).Addr() }

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n direct: " + x + "\n  proxy: " + y
		}
	}
	return "(equal)"
}
