package sweeper

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Caps on the exact count of a table's expired rows: above them the
// planner's estimate stands in, so that the count stays cheap on a large
// backlog. A dry run counts up to planBacklogCap; a run, which counts before
// every sweep of a table, up to runBacklogCap (about a millisecond of a
// scan, where 100,000 rows through an index can take 100 ms, a third of a
// 500,000-row sweep).
const (
	planBacklogCap = 100_000
	runBacklogCap  = 10_000
)

// countDoomed returns t's rows doomed at cutoff: exact up to limit, the
// planner's estimate above it (estimated true).
func (s *Sweeper) countDoomed(ctx context.Context, t target, cutoff time.Time, limit int64) (n int64, estimated bool, err error) {
	q := fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM %s AS s WHERE %s LIMIT %d) AS x", t.quoted, t.doomed("s"), limit+1)
	if err := s.pool.QueryRow(ctx, q, cutoff).Scan(&n); err != nil {
		return 0, false, fmt.Errorf("counting the expired rows of %s: %w", t.name, err)
	}
	if n <= limit {
		return n, false, nil
	}
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	var raw string
	if err := s.pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) SELECT 1 FROM "+t.quoted+" AS s WHERE "+t.doomed("s"), cutoff).Scan(&raw); err != nil {
		return n, true, nil
	}
	if json.Unmarshal([]byte(raw), &plan) == nil && len(plan) == 1 && int64(plan[0].Plan.Rows) > n {
		n = int64(plan[0].Plan.Rows)
	}
	return n, true, nil
}

// TablePlan is what a sweep would do to one table (Plan), or to one
// expiring column of a table.
type TablePlan struct {
	// Table is "schema.table" (a sidecar registry has its own).
	Table string
	// Column is set for the plan of an expiring column: a run sets its
	// expired values to NULL in the rows the row rule keeps.
	Column string
	// Expired is the number of rows expired now (for a column, the rows
	// whose value is expired and not yet NULL, the row live): exact, or
	// the planner's estimate when Estimated (above 100,000).
	Expired   int64
	Estimated bool
	// OldestExpired is the age of the oldest expired row, when cheap to
	// know (ttlproxy_sweeper_oldest_expired_age_seconds); 0 otherwise.
	OldestExpired time.Duration
	// Slices label the table's slices.
	Slices []string
	// Statement is the first slice's batch statement ($1 the cutoff, $2 the
	// batch size; $3 and $4 a block slice's bounds); Explain is the plan of
	// the rows it picks.
	Statement, Explain string
	// Warnings: a scan of the whole table per batch, a missing privilege.
	Warnings []string
	// PartitionsToDrop are the partitions a run would detach and drop
	// (Config.DropExpiredPartitions), and DetachConcurrently whether it
	// would detach them CONCURRENTLY.
	PartitionsToDrop   []string
	DetachConcurrently bool
}

// Plan reports, without deleting anything, what a run would do now: per
// table, then per expiring column of the table, the expired rows (values),
// the slices, the batch statement, its plan, and warnings (for ttlproxy
// sweep --dry-run).
func (s *Sweeper) Plan(ctx context.Context) ([]TablePlan, error) {
	cutoff, d, uncoordinated, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting: %w", err)
	}
	var out []TablePlan
	for i := range s.rules {
		r := &s.rules[i]
		for _, t := range sweepTargets(r) {
			p := TablePlan{Table: t.name}
			privileges := []string{"SELECT", "UPDATE", "DELETE"}
			if t.column != nil {
				p.Table, p.Column = t.column.table, t.column.name
				privileges = privileges[:2]
			}
			if uncoordinated != "" {
				p.Warnings = append(p.Warnings, "instances will sweep without coordination: "+uncoordinated)
			}
			var exists bool
			if err := s.pool.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", t.regclass).Scan(&exists); err != nil {
				return nil, err
			}
			if !exists {
				p.Warnings = append(p.Warnings, "the table does not exist")
				out = append(out, p)
				continue
			}
			if p.Expired, p.Estimated, err = s.countDoomed(ctx, t, cutoff, planBacklogCap); err != nil {
				p.Warnings = append(p.Warnings, err.Error())
			}
			if s.cfg.DropExpiredPartitions && d == dialectPostgres && t.name == r.QualifiedName() {
				parts, concurrently, err := s.expiredPartitions(ctx, r, cutoff)
				if err != nil {
					p.Warnings = append(p.Warnings, err.Error())
				}
				for _, x := range parts {
					p.PartitionsToDrop = append(p.PartitionsToDrop, x.name)
				}
				p.DetachConcurrently = concurrently
			}
			sl, err := slicerFor(d, s.blocksPerSlice).slices(ctx, s.pool, t, cutoff)
			if err != nil {
				p.Warnings = append(p.Warnings, "slicing: "+err.Error())
			}
			for _, x := range sl {
				p.Slices = append(p.Slices, x.label)
			}
			first := wholeTable
			if len(sl) > 0 {
				first = sl[0]
			}
			args := []any{cutoff}
			if first.blocks {
				args = append(args, pgtype.TID{BlockNumber: first.firstBlock, Valid: true},
					pgtype.TID{BlockNumber: first.endBlock, Valid: true})
			}
			switch {
			case t.registry != nil:
				lock, del := lockedBatchSQL(d, t, first, true)
				p.Statement = lock + ";\n" + del
			case first.blocks:
				p.Statement = "-- $2 and $3: the first and the first excluded row address of a range of blocks\n" +
					rangeBatchSQL(t) + ";\n-- a range that meets a row lock, again by picks that skip locked rows ($2 the batch size, $3 and $4 the range):\n" +
					blockBatchSQL(t, first, true)
			default:
				p.Statement = deleteBatchSQL(d, t, first, true)
			}
			inner := "SELECT 1 FROM " + t.quoted + " AS s WHERE " + t.doomed("s")
			if c := first.cond("s"); c != "" {
				inner += " AND " + c
			}
			rows, err := s.pool.Query(ctx, "EXPLAIN "+inner+" LIMIT 1000", args...)
			if err == nil {
				lines, cerr := pgx.CollectRows(rows, pgx.RowTo[string])
				if cerr == nil {
					p.Explain = strings.Join(lines, "\n")
				}
			}
			switch {
			case first.blocks:
				p.Warnings = append(p.Warnings, fmt.Sprintf("no index serves the expired condition: a run reads the whole table once, in %d slices of %d blocks (TID range scans)",
					len(sl), first.endBlock-first.firstBlock))
			case strings.Contains(p.Explain, "Seq Scan on"):
				p.Warnings = append(p.Warnings, "no index serves the expired condition: each batch reads the table until it finds its rows")
			}
			for _, priv := range privileges {
				var ok bool
				if err := s.pool.QueryRow(ctx, "SELECT pg_catalog.has_table_privilege(pg_catalog.to_regclass($1), $2)", t.regclass, priv).Scan(&ok); err == nil && !ok {
					p.Warnings = append(p.Warnings, "the sweeper's login lacks "+priv)
				}
			}
			if r.RuleKind() == "sidecar" && t.registry == nil && t.column == nil {
				var unique bool
				_ = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_index i
					WHERE i.indrelid = pg_catalog.to_regclass($1) AND i.indisunique)`, t.regclass).Scan(&unique)
				if !unique {
					p.Warnings = append(p.Warnings, "the registry has no unique key: stamping fails with 42P10")
				}
			}
			if t.name == r.QualifiedName() {
				if age, ok := s.oldestAge(ctx, r, cutoff, d); ok {
					p.OldestExpired = age
				}
			}
			out = append(out, p)
		}
	}
	return out, nil
}
