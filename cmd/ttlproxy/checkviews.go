package main

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// viewReads tells how the proxy reads a view over a table with expiring
// columns, by rewriting a read of it as a session does: under the
// configuration's rules, with a catalog of the views and the rule tables'
// columns (not the tables' partitions, which check does not read).
type viewReads struct {
	rw *rewrite.Rewriter
	st *rewrite.State
}

// newViewReads reads the rule tables' columns for the views of paths.
func newViewReads(ctx context.Context, conn *pgx.Conn, cfg *config.Config, paths proxy.LeakPaths) (*viewReads, error) {
	rw, err := rewrite.New(cfg.Tables, rewrite.Options{TrustedFunctions: cfg.TrustedFunctions})
	if err != nil {
		return nil, err
	}
	tables := map[string]*rewrite.TableInfo{}
	for i := range cfg.Tables {
		r := &cfg.Tables[i]
		cols, exists, err := tableColumns(ctx, conn, r.QuotedName())
		if err != nil {
			return nil, err
		}
		if !exists {
			continue
		}
		info := &rewrite.TableInfo{}
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for n := range cols {
				if !yield(n) {
					return
				}
			}
		}) {
			info.Columns = append(info.Columns, rewrite.Column{Name: name, Type: cols[name].typ})
		}
		tables[r.QualifiedName()] = info
	}
	cat := rewrite.NewCatalog(rewrite.CatalogData{Views: paths.Views, Tables: tables})
	return &viewReads{rw: rw, st: rewrite.NewState(rewrite.Session{Catalog: cat})}, nil
}

// read reports how `SELECT * FROM key` (key a view's "schema.name") goes
// through the proxy: expanded into the view's rewritten definition, read as
// it is, or refused with the rejection's message.
func (vr *viewReads) read(key string) (expanded bool, refused string) {
	dot := strings.LastIndexByte(key, '.')
	res, err := vr.rw.Rewrite("SELECT * FROM "+ttl.QuoteIdent(key[:dot])+"."+ttl.QuoteIdent(key[dot+1:]), vr.st)
	if err != nil {
		var e *rewrite.Error
		if errors.As(err, &e) {
			return false, strings.TrimPrefix(e.Message, "ttlproxy: ")
		}
		return false, err.Error()
	}
	return res.Rewritten, ""
}
