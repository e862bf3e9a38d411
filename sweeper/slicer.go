package sweeper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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

// A slice is a part of a table that the sweeper covers in one pass of
// batches: the unit that instances coordinate on (coordinate.go, one
// advisory lock per table and slice index) and that workers share out.
type slice struct {
	// label names the slice in logs, e.g. "all", "hash 0-4095" or
	// "blocks 0-1023".
	label string
	// hashCols (SQL identifiers), lo and hi restrict the slice to rows whose
	// yb_hash_code(hashCols) is in lo..hi.
	hashCols []string
	lo, hi   int
	// blocks restricts the slice to the rows stored in heap blocks
	// firstBlock up to endBlock (exclusive) of a PostgreSQL table: a TID
	// range scan (PostgreSQL 14+) with the bounds as parameters $3 and $4,
	// $3 moving past each batch's rows (blockParams).
	blocks               bool
	firstBlock, endBlock uint32
	// rowsPerBlock is the table's rows per heap block when it was sliced
	// (pg_class.reltuples / relpages, or counted in its first blocks when
	// it was never analyzed): how many blocks a range batch of a given size
	// covers. tableBlocks is the table's size in blocks then.
	rowsPerBlock float64
	tableBlocks  uint32
}

// Parameters of a block slice's batch: the lowest and the first excluded
// row address.
const (
	fromTIDParam = "$3::pg_catalog.tid"
	toTIDParam   = "$4::pg_catalog.tid"
)

// cond returns the slice's condition for rows visible as qualifier, or "".
func (sl slice) cond(qualifier string) string {
	if sl.blocks {
		return fmt.Sprintf("%s.ctid OPERATOR(pg_catalog.>=) %s AND %s.ctid OPERATOR(pg_catalog.<) %s", qualifier, fromTIDParam, qualifier, toTIDParam)
	}
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

// slicer splits a table into slices; cutoff is the run's.
type slicer interface {
	slices(ctx context.Context, q querier, t target, cutoff time.Time) ([]slice, error)
}

// slicerFor returns the slicer for dialect d; blocksPerSlice is the size of
// a PostgreSQL block slice (0: DefaultBlocksPerSlice).
func slicerFor(d dialect, blocksPerSlice uint32) slicer {
	if d == dialectYugabyte {
		return hashSlicer{buckets: ybHashBuckets}
	}
	if blocksPerSlice == 0 {
		blocksPerSlice = DefaultBlocksPerSlice
	}
	return blockSlicer{blocks: blocksPerSlice}
}

// DefaultBlocksPerSlice is the size of a PostgreSQL block slice: 1024 heap
// blocks, 8 MiB at the default block size, which a batch that finds few
// doomed rows reads in a few milliseconds, well within the 50 ms target.
const DefaultBlocksPerSlice = 1024

// blockSlicer is PostgreSQL's slicer. When the planner finds the doomed rows
// through an index (an index on the expiry column and few of them expired),
// the table is one slice and each batch walks the index. When it would read
// the table (no such index, a rule no index serves, or so many rows expired
// that a scan is cheaper), the table is cut into ranges of blocks heap
// blocks, each swept by TID range scans (PostgreSQL 14+) whose lower bound
// moves past each batch's rows: one run reads the table once, instead of
// once per batch. Slice i is always blocks i·blocks up to (i+1)·blocks,
// whatever the table's size, so that instances agree on what slice i is.
// Rows stored past the table's end when the run started are left for the
// next run. A partitioned table (ctids repeat across partitions) and a
// server before PostgreSQL 14 get one slice.
type blockSlicer struct {
	blocks uint32
}

func (b blockSlicer) slices(ctx context.Context, q querier, t target, cutoff time.Time) ([]slice, error) {
	var (
		version int
		kind    string
		nblocks int64
		density float64
	)
	err := q.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, c.relkind::text,
			pg_catalog.pg_relation_size(c.oid) / current_setting('block_size')::int,
			CASE WHEN c.relpages > 0 AND c.reltuples > 0 THEN c.reltuples / c.relpages ELSE 0 END
		FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1)`, t.regclass).Scan(&version, &kind, &nblocks, &density)
	if errors.Is(err, pgx.ErrNoRows) {
		return []slice{wholeTable}, nil // missing: the batch reports it
	}
	if err != nil {
		return nil, fmt.Errorf("reading the size of %s: %w", t.name, err)
	}
	if version < 140000 || kind != "r" {
		return []slice{wholeTable}, nil
	}
	scans, err := seqScans(ctx, q, t, cutoff)
	if err != nil {
		return nil, err
	}
	if !scans {
		return []slice{wholeTable}, nil
	}
	if density <= 0 {
		// Never analyzed: count the rows of the first blocks.
		sample := min(max(nblocks, 1), densitySampleBlocks)
		var n int64
		if err := q.QueryRow(ctx, "SELECT count(*) FROM "+t.quoted+" AS s WHERE s.ctid < $1::tid",
			pgtype.TID{BlockNumber: uint32(sample), Valid: true}).Scan(&n); err != nil {
			return nil, fmt.Errorf("counting the rows of %s's first blocks: %w", t.name, err)
		}
		density = max(float64(n)/float64(sample), 1)
	}
	out := blockSlices(nblocks, b.blocks)
	for i := range out {
		out[i].rowsPerBlock = density
		out[i].tableBlocks = uint32(nblocks)
	}
	return out, nil
}

// densitySampleBlocks is how many blocks of a never-analyzed table are
// counted for its rows per block: a TID range scan of 64 KiB.
const densitySampleBlocks = 8

// blockSlices cuts nblocks heap blocks into slices of size blocks (at least
// one slice).
func blockSlices(nblocks int64, size uint32) []slice {
	n := max((nblocks+int64(size)-1)/int64(size), 1)
	out := make([]slice, 0, n)
	for i := range n {
		first, end := uint32(i)*size, uint32(i+1)*size
		out = append(out, slice{label: fmt.Sprintf("blocks %d-%d", first, end-1), blocks: true, firstBlock: first, endBlock: end})
	}
	return out
}

// seqScans reports whether the planner reads t sequentially to find its
// doomed rows at cutoff (EXPLAIN of a batch's row pick).
func seqScans(ctx context.Context, q querier, t target, cutoff time.Time) (bool, error) {
	var raw string
	err := q.QueryRow(ctx, "EXPLAIN (FORMAT JSON) SELECT s.ctid FROM "+t.quoted+" AS s WHERE "+t.doomed("s")+" LIMIT 1000", cutoff).Scan(&raw)
	if err != nil {
		return false, fmt.Errorf("planning a batch of %s: %w", t.name, err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(raw), &plans); err != nil || len(plans) != 1 {
		return false, fmt.Errorf("planning a batch of %s: unexpected EXPLAIN output %.200q", t.name, raw)
	}
	return plans[0].Plan.seqScanOf("s"), nil
}

// planNode is the part of an EXPLAIN (FORMAT JSON) node seqScans reads.
type planNode struct {
	NodeType string     `json:"Node Type"`
	Alias    string     `json:"Alias"`
	Plans    []planNode `json:"Plans"`
}

// seqScanOf reports whether the plan reads the relation aliased alias with a
// sequential scan.
func (n planNode) seqScanOf(alias string) bool {
	if n.NodeType == "Seq Scan" && n.Alias == alias {
		return true
	}
	for _, c := range n.Plans {
		if c.seqScanOf(alias) {
			return true
		}
	}
	return false
}

// ybHashBuckets is the number of yb_hash_code slices of a YugabyteDB table:
// yb_hash_code is 16-bit (0..65535) and the seed recipe uses 16 buckets of
// width 4096, so each DELETE stays within a few tablets.
//
// Sources (read, not run on a YugabyteDB server): YSQL's yb_hash_code
// "returns the hash of a set of given input values using the hash function
// DocDB uses to shard its data", an int4, and when a yb_hash_code condition
// is pushed down, only the tablets that "definitely contain values in the
// requested ranges" are read (docs.yugabyte.com/stable/api/ysql/exprs/
// func_yb_hash_code). DocDB's hash space is 0x0000 to 0xFFFF, and "for a
// table with 16 tablets" it is divided into [0x0000, 0x1000), [0x1000,
// 0x2000), … (docs.yugabyte.com, architecture, DocDB sharding): the 16
// slices here are exactly those ranges.
const ybHashBuckets = 16

// ybHashCodeSpace is the number of yb_hash_code values (0..65535).
const ybHashCodeSpace = 65536

// hashSlicer splits a YugabyteDB table into yb_hash_code ranges over the
// hash columns of its primary key. A table without hash columns (range
// sharded, or without a primary key) is one slice.
type hashSlicer struct {
	buckets int
}

func (h hashSlicer) slices(ctx context.Context, q querier, t target, _ time.Time) ([]slice, error) {
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
// made of plain columns (a collated key column is one slice). These are
// the forms YSQL's ruleutils.c prints: a group of several hash columns in
// parentheses followed by ") HASH", one hash column followed by " HASH",
// range columns by " ASC" or " DESC"; a primary key never gets SPLIT INTO.
// The columns stay in key order: yb_hash_code over them in another order is
// not pushed down to the tablets (regression test yb_hash_code).
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
