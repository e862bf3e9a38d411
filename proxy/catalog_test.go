package proxy

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

const catalogSchema = `
CREATE TABLE items (id int PRIMARY KEY, note text, dropped int, expires_at timestamptz, n numeric(10,2), UNIQUE (note, id));
ALTER TABLE items DROP COLUMN dropped;
CREATE UNIQUE INDEX items_lower_note ON items (lower(note));
CREATE UNIQUE INDEX items_partial ON items (n) WHERE n > 0;
CREATE UNIQUE INDEX items_including ON items (n) INCLUDE (note);
CREATE SCHEMA other;
CREATE VIEW other.items AS SELECT 1 AS x;
CREATE TABLE other.unrelated (id int);
`

func TestCatalogAtStartup(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	execDirect(t, db, catalogSchema)
	p := startProxy(t, Config{})

	conn := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	mustExec(t, conn, "SELECT 1")
	first := p.fake.lastState()
	s := p.fake.lastSession()
	if s == nil || s.Catalog == nil {
		t.Fatalf("no catalog in session %+v", s)
	}
	want := &rewrite.TableInfo{
		Columns: []rewrite.Column{
			{Name: "id", Type: "integer"},
			{Name: "note", Type: "text"},
			{Name: "expires_at", Type: "timestamp with time zone"},
			{Name: "n", Type: "numeric(10,2)"},
		},
		UniqueKeys: [][]string{{"id"}, {"note", "id"}, {"n"}},
	}
	if got := s.Catalog.Data().Tables["public.items"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("public.items = %+v, want %+v", got, want)
	}
	if len(s.Catalog.Data().Tables) != 1 {
		t.Fatalf("tables %v", s.Catalog.Data().Tables)
	}
	if got := s.Catalog.Data().Schemas["items"]; !slices.Equal(got, []string{"other", "public"}) {
		t.Fatalf("schemas holding items: %v", got)
	}
	if !slices.Equal(s.SearchPath, []string{"postgres", "public"}) || s.Bypass {
		t.Fatalf("search_path %q bypass %v", s.SearchPath, s.Bypass)
	}

	// A second session of the same database shares the snapshot.
	conn2 := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	mustExec(t, conn2, "SELECT 1")
	if p.fake.lastState() == first || p.fake.lastSession().Catalog != s.Catalog {
		t.Fatal("catalog snapshot not shared between sessions")
	}
}

func TestCatalogRefreshAndSessionSettings(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	execDirect(t, db, catalogSchema,
		`ALTER DATABASE `+db+` SET search_path = other, "$user", public`)
	p := startProxy(t, Config{CatalogTTL: time.Nanosecond, BypassRoles: []string{"postgres"}})

	conn := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	mustExec(t, conn, "SELECT 1")
	s := p.fake.lastSession()
	if !slices.Equal(s.SearchPath, []string{"other", "postgres", "public"}) || !s.Bypass {
		t.Fatalf("search_path %q bypass %v", s.SearchPath, s.Bypass)
	}

	execDirect(t, db, "ALTER TABLE public.items ADD COLUMN added text")
	cfg, err := pgx.ParseConfig(p.connString(t, db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = `"Mixed Case", PUBLIC`
	conn2 := connectConfig(t, cfg)
	mustExec(t, conn2, "SELECT 1")
	s2 := p.fake.lastSession()
	if s2.Catalog == s.Catalog {
		t.Fatal("expired catalog snapshot reused")
	}
	cols := s2.Catalog.Data().Tables["public.items"].Columns
	if cols[len(cols)-1].Name != "added" {
		t.Fatalf("columns after ALTER: %v", cols)
	}
	if !slices.Equal(s2.SearchPath, []string{"Mixed Case", "public"}) {
		t.Fatalf("search_path %q", s2.SearchPath)
	}
}

// TestCatalogQueryFailure: a role that cannot read pg_attribute gets a
// session without catalog, and its connection works, also after the
// catalog has aged and its reload (in a transaction block of its own) has
// failed too.
func TestCatalogQueryFailure(t *testing.T) {
	sessionModeOnly(t, "logs in as a role the server trusts, without the password the proxy's own authentication asks for")
	db := pgtest.NewDatabase(t)
	ensureRole(t, roleSQL("ttl_trust", "unused"))
	execDirect(t, db, catalogSchema, "REVOKE SELECT ON pg_catalog.pg_attribute FROM PUBLIC")
	const ttl = 200 * time.Millisecond
	p := startProxy(t, Config{CatalogTTL: ttl})
	cfg, err := pgx.ParseConfig(p.connString(t, db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = "ttl_trust", ""
	conn := connectConfig(t, cfg)
	if got := queryString(t, conn, "SELECT current_user::text"); got != "ttl_trust" {
		t.Fatalf("current_user %q", got)
	}
	s := p.fake.lastSession()
	if s.Catalog != nil {
		t.Fatalf("catalog %+v despite the failed query", s.Catalog)
	}
	if !slices.Equal(s.SearchPath, []string{"ttl_trust", "public"}) {
		t.Fatalf("search_path %q", s.SearchPath)
	}
	time.Sleep(ttl + 100*time.Millisecond)
	for range 2 {
		if got := queryString(t, conn, "SELECT current_user::text"); got != "ttl_trust" {
			t.Fatalf("after the failed reload: current_user %q", got)
		}
	}
}

func TestNoRulesNoCatalogQuery(t *testing.T) {
	rw, err := rewrite.New(nil, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{Rewriter: rw})
	conn := p.connect(t, "postgres", pgx.QueryExecModeCacheStatement)
	mustExec(t, conn, "SELECT 1")
	if s := p.fake.lastSession(); s.Catalog != nil || s.SearchPath != nil {
		t.Fatalf("session %+v without rules", s)
	}
}

// TestReplicationConnection: a walsender connection is relayed untouched.
func TestReplicationConnection(t *testing.T) {
	p := startProxy(t, Config{})
	cfg, err := pgconn.ParseConfig(p.connString(t, "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(testContext(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(testContext(t))
	results, err := conn.Exec(testContext(t), "IDENTIFY_SYSTEM").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 || len(results[0].Rows) != 1 {
		t.Fatalf("IDENTIFY_SYSTEM: %+v", results)
	}
	if n := p.fake.callCount(); n != 0 {
		t.Fatalf("rewriter called %d times on a replication connection", n)
	}
}

// TestCatalogChildren: inheritance children and partitions of a TTL table,
// at any depth, are in Catalog.Children with their columns and keys; a child
// that is a TTL table itself keeps its own rule.
func TestCatalogChildren(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	execDirect(t, db, `
CREATE TABLE items (id int, expires_at timestamptz, PRIMARY KEY (id, expires_at)) PARTITION BY RANGE (expires_at);
CREATE SCHEMA parts;
CREATE TABLE parts.items_2030 PARTITION OF items FOR VALUES FROM ('2030-01-01') TO ('2031-01-01') PARTITION BY HASH (id);
CREATE TABLE parts.items_2030_h0 PARTITION OF parts.items_2030 FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE parts.items_2030_h1 PARTITION OF parts.items_2030 FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE events (id int PRIMARY KEY, expires_at timestamptz);
CREATE TABLE events_archive (note text) INHERITS (events);
CREATE TABLE own (id int) INHERITS (events);
CREATE TABLE other_parts (id int);
`)
	rules := []ttl.Rule{{Table: "items"}, {Table: "events"}, {Table: "own"}}
	rw, err := rewrite.New(rules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{Rewriter: rw})
	conn := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	mustExec(t, conn, "SELECT 1")
	c := p.fake.lastSession().Catalog
	if c == nil {
		t.Fatal("no catalog")
	}
	cat := c.Data()
	want := map[string]string{
		"parts.items_2030":      "public.items",
		"parts.items_2030_h0":   "public.items",
		"parts.items_2030_h1":   "public.items",
		"public.events_archive": "public.events",
	}
	if !reflect.DeepEqual(cat.Children, want) {
		t.Fatalf("children %v, want %v", cat.Children, want)
	}
	h0 := cat.Tables["parts.items_2030_h0"]
	if h0 == nil || len(h0.Columns) != 2 || !reflect.DeepEqual(h0.UniqueKeys, [][]string{{"id", "expires_at"}}) {
		t.Fatalf("partition info %+v", h0)
	}
	if cols := cat.Tables["public.events_archive"].Columns; len(cols) != 3 || cols[2].Name != "note" {
		t.Fatalf("child columns %+v", cols)
	}
	if got := cat.Schemas["items_2030_h1"]; !slices.Equal(got, []string{"parts"}) {
		t.Fatalf("schemas of a partition name: %v", got)
	}
	if _, ok := cat.Tables["public.other_parts"]; ok {
		t.Fatal("unrelated table in the catalog")
	}
}
