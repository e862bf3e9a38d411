package proxy

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/ttlproxy/ttlproxy/rewrite"
)

// row_security required (rewrite.Options.RequireRowSecurity): the rewriter
// refuses statements on a TTL table the catalog shows without the live
// policy. The proxy says which tables those are, in its log each time a
// catalog read finds another set than the last (at start for the DDL
// events login's database, after DDL events, on reload and as snapshots
// age), and in /status.

// rowSecurityReport remembers, per database, the unprotected tables last
// logged, so that each change is logged once.
type rowSecurityReport struct {
	mu   sync.Mutex
	last map[string]string
}

// note logs the tables cat shows unprotected in database db when they
// differ from the last read's; a no-op unless rs requires row security.
func (rs *ruleSet) noteRowSecurity(log *slog.Logger, db string, cat *rewrite.Catalog) {
	if rs.rw == nil || !rs.rw.RequiresRowSecurity() || cat == nil {
		return
	}
	missing := rs.rw.Unprotected(cat)
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(missing)) {
		b.WriteString(t + ": " + missing[t] + "; ")
	}
	key := b.String()
	rs.rsReport.mu.Lock()
	prev, seen := rs.rsReport.last[db]
	if rs.rsReport.last == nil {
		rs.rsReport.last = map[string]string{}
	}
	rs.rsReport.last[db] = key
	rs.rsReport.mu.Unlock()
	if seen && prev == key {
		return
	}
	if len(missing) == 0 {
		log.Info("row_security required: every TTL table carries the live policy", "database", db)
		return
	}
	log.Error("row_security required: statements on these TTL tables are refused until ttlproxy install --row-security protects them",
		"database", db, "tables", strings.TrimSuffix(key, "; "))
}

// RowSecurityStatus is the row_security level and what it finds, for
// /status.
type RowSecurityStatus struct {
	// Level is "required" or "off".
	Level string `json:"level"`
	// Unprotected are the TTL tables and children the newest catalog of
	// each database shows without the live policy, refused at level
	// required.
	Unprotected []UnprotectedTable `json:"unprotected"`
}

// UnprotectedTable is one table lacking the live policy.
type UnprotectedTable struct {
	Database string `json:"database"`
	Table    string `json:"table"`
	Reason   string `json:"reason"`
}

// rowSecurityStatus describes the row_security level of rs and the tables
// its cached catalogs show unprotected.
func (rs *ruleSet) rowSecurityStatus() RowSecurityStatus {
	st := RowSecurityStatus{Level: "off", Unprotected: []UnprotectedTable{}}
	if rs.rw == nil || !rs.rw.RequiresRowSecurity() {
		return st
	}
	st.Level = "required"
	rs.catalogs.mu.Lock()
	cats := make(map[string]*rewrite.Catalog, len(rs.catalogs.m))
	for db, e := range rs.catalogs.m {
		cats[db] = e.cat
	}
	rs.catalogs.mu.Unlock()
	for _, db := range slices.Sorted(maps.Keys(cats)) {
		missing := rs.rw.Unprotected(cats[db])
		for _, t := range slices.Sorted(maps.Keys(missing)) {
			st.Unprotected = append(st.Unprotected, UnprotectedTable{Database: db, Table: t, Reason: missing[t]})
		}
	}
	return st
}

// watchEventsDatabase starts the DDL events of the database the DDL events
// login names, so that a proxy at row_security required reads (and
// reports) that database's catalog at start, before a client comes.
func (s *Server) watchEventsDatabase() {
	if s.events == nil || s.events.conf == nil || len(s.set.Load().rules) == 0 {
		return
	}
	db := s.events.conf.Database
	if db == "" {
		db = s.events.conf.User
	}
	if d := s.events.forDB(db); d != nil {
		d.poke()
	}
}

// warnCatalogWindow says, at start, that a proxy with TTL tables and no
// DDL events follows DDL made outside it only as catalogs age.
func (s *Server) warnCatalogWindow(ctx context.Context) {
	if len(s.set.Load().rules) == 0 || (s.events != nil && s.events.conf != nil) {
		return
	}
	s.log.WarnContext(ctx, "no DDL events (ddl_events_dsn or a sweeper DSN): DDL made outside the proxy reaches sessions only when their catalog is older than catalog_ttl",
		"catalog_ttl", s.cfg.CatalogTTL.String())
}

// catalogRefresh names how the sessions' catalogs follow DDL made outside
// the proxy, for /status: "ddl_events", or "catalog_ttl" (every
// Config.CatalogTTL) without DDL events.
func (s *Server) catalogRefresh() string {
	if s.events != nil && s.events.conf != nil {
		return "ddl_events"
	}
	return "catalog_ttl"
}
