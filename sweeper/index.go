package sweeper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// createIndexes creates, for each rule with CreateIndex, the missing btree
// indexes its sweeps read: on the expiry column (the base column of a
// derived rule), and on the expiry column of each expiring column that has
// one of its own (a derived column's base column keeps its values after
// they are nulled, so an index on it would lead the picks through every
// nulled row again; columns.go). A column counts as missing its index when
// no valid plain btree index is led by it. Each is made with CREATE INDEX
// CONCURRENTLY, on a connection of its own without statement timeout,
// outside any transaction: writes to the table go on meanwhile. A failure
// is logged and counted and leaves the table swept without the index; the
// failed build's invalid index is dropped so that the next start tries
// again.
func (s *Sweeper) createIndexes(ctx context.Context) {
	for i := range s.rules {
		r := &s.rules[i]
		if !r.CreateIndex {
			continue
		}
		for _, col := range indexColumns(r) {
			if err := s.createIndex(ctx, r, col); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.m.errors.WithLabelValues(r.QualifiedName()).Inc()
				s.log.Error("creating the expiry index failed; the table is swept without it",
					slog.String("table", r.QualifiedName()), slog.String("column", col), slog.Any("error", err))
			}
		}
	}
}

// indexColumns returns the columns createIndexes indexes for r: the row
// rule's expiry order column, then the expiry columns of its expiring
// columns.
func indexColumns(r *ttl.Rule) []string {
	var cols []string
	if col, ok := orderColumn(r); ok {
		cols = append(cols, col)
	}
	for i := range r.Columns {
		if c := &r.Columns[i]; c.Kind() == ttl.KindColumn {
			cols = append(cols, c.ExpiresAtColumn)
		}
	}
	return cols
}

// expiryIndexName is the name of the index createIndex makes: readable, and
// within NAMEDATALEN by a hash of the table and column.
func expiryIndexName(r *ttl.Rule, col string) string {
	sum := sha256.Sum256([]byte(r.QualifiedName() + "\x00" + col))
	name := "ttlproxy_expiry_" + r.Table
	if len(name) > 45 {
		name = name[:45]
	}
	return name + "_" + hex.EncodeToString(sum[:4])
}

// createIndex creates the btree index on r's column col when the table has
// none led by it.
func (s *Sweeper) createIndex(ctx context.Context, r *ttl.Rule, col string) error {
	if indexed, err := s.btreeIndexed(ctx, r, col); err != nil || indexed {
		return err
	}
	conn, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := expiryIndexName(r, col)
	quoted := ttl.QuoteIdent(r.SchemaName()) + "." + ttl.QuoteIdent(name)
	if _, err := conn.Exec(ctx, "SET statement_timeout = 0"); err != nil {
		return err
	}
	s.log.Info("creating the expiry index", slog.String("table", r.QualifiedName()), slog.String("column", col), slog.String("index", name))
	sql := fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s (%s)", ttl.QuoteIdent(name), r.QuotedName(), ttl.QuoteIdent(col))
	if _, err := conn.Exec(ctx, sql); err != nil {
		// A failed concurrent build leaves an invalid index behind.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "DROP INDEX CONCURRENTLY IF EXISTS "+quoted)
		return err
	}
	s.log.Info("expiry index created", slog.String("table", r.QualifiedName()), slog.String("column", col), slog.String("index", name))
	return nil
}
