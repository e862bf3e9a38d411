package sweeper

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// dialect is the kind of database behind the DSN, detected once per run.
type dialect int

const (
	dialectPostgres dialect = iota
	// dialectYugabyte is YugabyteDB YSQL: version() contains "-YB-".
	dialectYugabyte
)

func (d dialect) String() string {
	if d == dialectYugabyte {
		return "yugabytedb"
	}
	return "postgresql"
}

// A slice is a part of a table's key space that the sweeper covers in one
// pass of batches. Slices are the unit that multi-instance coordination
// (advisory locks or a lease row, ARCHITECTURE.md "The sweeper") will hand out.
type slice struct {
	// label names the slice in logs, e.g. "all" or "hash 0-4095".
	label string
	// hashCols (SQL identifiers), lo and hi restrict the slice to rows whose
	// yb_hash_code(hashCols) is in lo..hi; no hashCols means the whole table.
	hashCols []string
	lo, hi   int
}

// cond returns the slice's condition for rows visible as qualifier, or "".
func (sl slice) cond(qualifier string) string {
	if len(sl.hashCols) == 0 {
		return ""
	}
	qualified := make([]string, len(sl.hashCols))
	for i, c := range sl.hashCols {
		qualified[i] = qualifier + "." + c
	}
	return fmt.Sprintf("yb_hash_code(%s) BETWEEN %d AND %d", strings.Join(qualified, ", "), sl.lo, sl.hi)
}

// wholeTable is the single slice that covers a table.
var wholeTable = slice{label: "all"}

// querier is what slicers need from a pool or connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// slicer splits a table into slices.
type slicer interface {
	slices(ctx context.Context, q querier, t target) ([]slice, error)
}

// slicerFor returns the slicer for dialect d.
func slicerFor(d dialect) slicer {
	if d == dialectYugabyte {
		return hashSlicer{buckets: ybHashBuckets}
	}
	return oneSlice{}
}

// oneSlice is PostgreSQL's slicer: the whole table in one pass. With an index
// on the expiry column a pass costs in proportion to the expired rows;
// without one, every batch scans until it has found its rows.
// TODO(sweeper): ctid block ranges (TID range scans) for tables without an
// expiry index, so that one run is at worst one sequential pass.
type oneSlice struct{}

func (oneSlice) slices(context.Context, querier, target) ([]slice, error) {
	return []slice{wholeTable}, nil
}

// ybHashBuckets is the number of yb_hash_code slices of a YugabyteDB table:
// yb_hash_code is 16-bit (0..65535) and the seed recipe uses 16 buckets of
// width 4096, so each DELETE stays within a few tablets.
const ybHashBuckets = 16

// ybHashCodeSpace is the number of yb_hash_code values (0..65535).
const ybHashCodeSpace = 65536

// hashSlicer splits a YugabyteDB table into yb_hash_code ranges over the
// hash columns of its primary key. A table without hash columns (range
// sharded, or without a primary key) is one slice.
type hashSlicer struct {
	buckets int
}

func (h hashSlicer) slices(ctx context.Context, q querier, t target) ([]slice, error) {
	var def string
	err := q.QueryRow(ctx,
		`SELECT pg_catalog.pg_get_indexdef(i.indexrelid) FROM pg_catalog.pg_index i
		 WHERE i.indrelid = pg_catalog.to_regclass($1) AND i.indisprimary`, t.regclass).Scan(&def)
	if errors.Is(err, pgx.ErrNoRows) {
		return []slice{wholeTable}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the primary key of %s: %w", t.name, err)
	}
	cols := hashColumns(def)
	if len(cols) == 0 {
		return []slice{wholeTable}, nil
	}
	return hashSlices(cols, h.buckets), nil
}

// hashSlices returns n slices of yb_hash_code(cols) covering 0..65535.
func hashSlices(cols []string, n int) []slice {
	if n < 1 {
		n = 1
	}
	out := make([]slice, 0, n)
	for i := range n {
		lo := i * ybHashCodeSpace / n
		hi := (i+1)*ybHashCodeSpace/n - 1
		out = append(out, slice{label: fmt.Sprintf("hash %d-%d", lo, hi), hashCols: cols, lo: lo, hi: hi})
	}
	return out
}

// plainIdent matches an identifier as pg_get_indexdef prints it: bare
// (lower case) or double-quoted.
var plainIdent = regexp.MustCompile(`^(?:[a-z_][a-z0-9_$]*|"(?:[^"]|"")+")$`)

// hashColumns returns the hash key columns (as SQL identifiers) of a
// YugabyteDB primary key definition such as
// `CREATE UNIQUE INDEX t_pkey ON public.t USING lsm ((a, b) HASH, c ASC)` or
// `... USING lsm (a HASH, c ASC)`, or nil when the key has none or is not
// made of plain columns.
func hashColumns(indexdef string) []string {
	i := strings.Index(strings.ToLower(indexdef), " using lsm (")
	if i < 0 {
		return nil
	}
	elems := splitTopLevel(indexdef[i+len(" using lsm ("):])
	if len(elems) == 0 {
		return nil
	}
	first := elems[0]
	if strings.HasPrefix(first, "(") {
		// (a, b) HASH
		end := strings.LastIndex(first, ")")
		if end < 0 || !strings.EqualFold(strings.TrimSpace(first[end+1:]), "HASH") {
			return nil
		}
		cols := splitTopLevel(first[1:end] + ")")
		for _, c := range cols {
			if !plainIdent.MatchString(c) {
				return nil
			}
		}
		return cols
	}
	var cols []string
	for _, e := range elems {
		name, ok := strings.CutSuffix(e, " HASH")
		if !ok {
			break
		}
		if !plainIdent.MatchString(name) {
			return nil
		}
		cols = append(cols, name)
	}
	return cols
}

// splitTopLevel splits s, the text after an opening parenthesis, at the
// commas of nesting level 0 up to the matching closing parenthesis, and
// trims each part. Double-quoted identifiers are skipped over.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start, inQuote := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote:
			if c == '"' {
				inQuote = false
			}
		case c == '"':
			inQuote = true
		case c == '(':
			depth++
		case c == ')':
			if depth == 0 {
				return append(parts, strings.TrimSpace(s[start:i]))
			}
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return nil // unbalanced
}
