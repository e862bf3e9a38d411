package install

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Names of what install creates. The trigger names sort after most others on
// purpose: PostgreSQL fires the BEFORE triggers of one event in name order,
// and the purge must see NEW as the table's other BEFORE triggers leave it
// (one that lower-cases an e-mail changes which row collides).
const (
	// Schema holds the trigger functions.
	Schema = "ttlproxy"
	// InsertTrigger fires BEFORE INSERT (also for COPY FROM and for the
	// insert half of INSERT … ON CONFLICT and MERGE).
	InsertTrigger = "zz_ttlproxy_purge_expired_insert"
	// UpdateTrigger fires BEFORE UPDATE OF the key columns, only when a key
	// value changes.
	UpdateTrigger = "zz_ttlproxy_purge_expired_update"
	// FunctionPrefix starts every trigger function's name.
	FunctionPrefix = "purge_expired__"
)

// maxIdentBytes is PostgreSQL's identifier limit (NAMEDATALEN-1); longer
// names are silently truncated by the server, which would make two tables'
// functions collide.
const maxIdentBytes = 63

// FunctionName returns the unquoted name, in schema Schema, of the trigger
// function for the table schema.table: purge_expired__<schema>__<table> when
// that fits in 63 bytes and cannot be read two ways, otherwise a clipped form
// ending in "_" and 12 hex digits of SHA-256(schema NUL table).
func FunctionName(schema, table string) string {
	name := FunctionPrefix + schema + "__" + table
	// "__" inside schema, or a schema ending in "_", would let two
	// (schema, table) pairs spell the same name.
	if len(name) <= maxIdentBytes && !strings.Contains(schema, "__") && !strings.HasSuffix(schema, "_") {
		return name
	}
	sum := sha256.Sum256([]byte(schema + "\x00" + table))
	suffix := "_" + hex.EncodeToString(sum[:6])
	return clip(name, maxIdentBytes-len(suffix)) + suffix
}

// clip cuts s to at most n bytes without splitting a UTF-8 sequence.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// qualifiedFunction returns the quoted, schema-qualified function name.
func qualifiedFunction(r *ttl.Rule) string {
	return ttl.QuoteIdent(Schema) + "." + ttl.QuoteIdent(FunctionName(r.SchemaName(), r.Table))
}

// Plan returns the SQL statements that install (or, with uninstall, remove)
// the collision triggers for rules, in order, to be run in one transaction.
// keys maps "schema.table" (Rule.QualifiedName) to the column sets of the
// table's unique keys, as UniqueKeys returns them; it is not read when
// uninstalling. A table whose entry is empty, or with no row rule (rule
// none: no row expires), gets no trigger, and any left from an earlier
// install is dropped.
//
// For each table with keys, install creates:
//   - ttlproxy.purge_expired__<schema>__<table>() (see FunctionName), a
//     SECURITY DEFINER plpgsql function with search_path fixed to
//     pg_catalog, pg_temp and fully qualified names, that for each unique key
//     deletes the rows of the table holding NEW's key value that are expired
//     at now() (ttl.Rule.ExpiredCondition, the one shared definition);
//   - a BEFORE INSERT row trigger and a BEFORE UPDATE OF <key columns> row
//     trigger whose WHEN clause lets it fire only when a key value changes.
//
// A tuple deleted by the current transaction is invisible to the unique
// check, which reads with a dirty snapshot (SnapshotDirty), and to the
// ON CONFLICT pre-check, which uses the same snapshot; so the write that
// follows the trigger sees no conflict with the expired row, while a live row
// still raises 23505 or is the ON CONFLICT target. The cost is one function
// call and one index probe per unique key per inserted row (and per updated
// row whose key changes); PostgreSQL also stops batching COPY FROM into
// multi-row inserts when a table has a BEFORE INSERT row trigger.
//
// Uninstalling drops the triggers and functions of rules' tables, then,
// with a DO block, every other trigger calling a ttlproxy.purge_expired__*
// function and those functions (left from tables no longer configured), and
// schema ttlproxy unless something else lives in it.
//
// Errors name the table.
func Plan(rules []ttl.Rule, keys map[string][][]string, uninstall bool) ([]string, error) {
	steps, err := plan(rules, keys, uninstall)
	if err != nil {
		return nil, err
	}
	stmts := make([]string, len(steps))
	for i, s := range steps {
		stmts[i] = s.sql
	}
	return stmts, nil
}

// step is one planned statement and the table it is for ("" for none), so
// that an error running it can name the table.
type step struct {
	table string
	sql   string
}

func plan(rules []ttl.Rule, keys map[string][][]string, uninstall bool) ([]step, error) {
	seen := make(map[string]bool, len(rules))
	for i := range rules {
		r := &rules[i]
		if err := checkRule(r); err != nil {
			return nil, err
		}
		if seen[r.QualifiedName()] {
			return nil, fmt.Errorf("table %s: listed twice", r.QualifiedName())
		}
		seen[r.QualifiedName()] = true
	}
	var steps []step
	add := func(r *ttl.Rule, stmts []string) {
		for _, s := range stmts {
			steps = append(steps, step{table: r.QualifiedName(), sql: s})
		}
	}
	if uninstall {
		for i := range rules {
			add(&rules[i], dropTable(&rules[i]))
		}
		return append(steps, step{sql: cleanup}), nil
	}

	steps = append(steps, step{sql: "CREATE SCHEMA IF NOT EXISTS " + ttl.QuoteIdent(Schema)})
	for i := range rules {
		r := &rules[i]
		if !r.HasRowRule() {
			// No row expires (rule none): no expired row can hold a key.
			// A trigger left from a row rule the table had goes.
			add(r, dropTable(r))
			continue
		}
		tkeys, ok := keys[r.QualifiedName()]
		if !ok {
			return nil, fmt.Errorf("table %s: no unique keys given (an empty list means none)", r.QualifiedName())
		}
		tkeys, err := normalizeKeys(r, tkeys)
		if err != nil {
			return nil, err
		}
		if len(tkeys) == 0 {
			add(r, dropTable(r))
			continue
		}
		add(r, installTable(r, tkeys))
	}
	return steps, nil
}

func checkRule(r *ttl.Rule) error {
	if err := r.Validate(); err != nil {
		if strings.HasPrefix(err.Error(), r.QualifiedName()+": ") {
			return fmt.Errorf("table %w", err) // already names it
		}
		return fmt.Errorf("table %s: %w", r.QualifiedName(), err)
	}
	switch r.RuleKind() {
	case ttl.KindColumn:
	case ttl.KindDerived:
		if r.BaseColumn == "" {
			return fmt.Errorf("table %s: derived rule without a base column", r.QualifiedName())
		}
	case ttl.KindSidecar:
		if r.SidecarTable == "" || len(r.KeyColumns) == 0 {
			return fmt.Errorf("table %s: sidecar rule without a registry table or key columns", r.QualifiedName())
		}
	case ttl.KindNone:
	default:
		return fmt.Errorf("table %s: unknown rule kind %q", r.QualifiedName(), r.Kind)
	}
	return nil
}

// normalizeKeys rejects empty names and drops repeated column sets (a primary
// key and a unique constraint on the same columns need one probe).
func normalizeKeys(r *ttl.Rule, keys [][]string) ([][]string, error) {
	var out [][]string
	seen := map[string]bool{}
	for _, k := range keys {
		if len(k) == 0 {
			return nil, fmt.Errorf("table %s: empty unique key", r.QualifiedName())
		}
		for _, c := range k {
			if c == "" {
				return nil, fmt.Errorf("table %s: unique key %v has an empty column name", r.QualifiedName(), k)
			}
		}
		id := strings.Join(k, "\x00")
		if !seen[id] {
			seen[id] = true
			out = append(out, k)
		}
	}
	return out, nil
}

func installTable(r *ttl.Rule, keys [][]string) []string {
	fn := qualifiedFunction(r)
	table := r.QuotedName()

	var cols []string // key columns, each once, in first-seen order
	seen := map[string]bool{}
	var changed []string
	for _, k := range keys {
		for _, c := range k {
			if !seen[c] {
				seen[c] = true
				cols = append(cols, ttl.QuoteIdent(c))
			}
		}
		changed = append(changed, fmt.Sprintf("%s IS DISTINCT FROM %s", rowOf("OLD", k), rowOf("NEW", k)))
	}

	return []string{
		createFunction(r, fn, keys),
		"REVOKE ALL ON FUNCTION " + fn + "() FROM PUBLIC",
		fmt.Sprintf("COMMENT ON FUNCTION %s() IS %s", fn, ttl.QuoteLiteral(
			"ttlproxy: deletes the expired rows of "+r.QualifiedName()+
				" that hold a unique key value an inserted or updated row is about to take; created by ttlproxy install")),
		fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", ttl.QuoteIdent(InsertTrigger), table),
		fmt.Sprintf("CREATE TRIGGER %s BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()",
			ttl.QuoteIdent(InsertTrigger), table, fn),
		fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", ttl.QuoteIdent(UpdateTrigger), table),
		fmt.Sprintf("CREATE TRIGGER %s BEFORE UPDATE OF %s ON %s FOR EACH ROW WHEN (%s) EXECUTE FUNCTION %s()",
			ttl.QuoteIdent(UpdateTrigger), strings.Join(cols, ", "), table, strings.Join(changed, " OR "), fn),
	}
}

// createFunction returns the CREATE OR REPLACE FUNCTION statement. One DELETE
// per key, each guarded on UPDATE by "this key's value changes": when it does
// not, the only row holding it is the row being updated, which must not be
// deleted under it (heap_update would fail with "tuple to be updated was
// already modified by an operation triggered by the current command").
func createFunction(r *ttl.Rule, fn string, keys [][]string) string {
	var b strings.Builder
	// The body refers to NEW/OLD fields and to table columns; a column named
	// like a plpgsql variable (found) must mean the column.
	b.WriteString("#variable_conflict use_column\nBEGIN\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  -- unique key (%s)\n", strings.Join(k, ", "))
		fmt.Fprintf(&b, "  IF TG_OP = 'INSERT' OR %s IS DISTINCT FROM %s THEN\n", rowOf("NEW", k), rowOf("OLD", k))
		fmt.Fprintf(&b, "    %s;\n", purgeStatement(r, k))
		b.WriteString("  END IF;\n")
	}
	b.WriteString("  RETURN NEW;\nEND\n")
	body := b.String()
	return fmt.Sprintf("CREATE OR REPLACE FUNCTION %s() RETURNS trigger\n"+
		"LANGUAGE plpgsql VOLATILE SECURITY DEFINER\n"+
		"SET search_path = pg_catalog, pg_temp\n"+
		"AS %s", fn, dollarQuote(body))
}

// purgeStatement deletes the expired rows of r's table (aliased t) whose key
// columns equal NEW's. For a sidecar rule it also deletes the deleted rows'
// expired registry rows: they are keyed by the base table's primary key, and
// left behind they would mark a new row with the same key as expired the
// moment it is inserted. Registry rows that are not expired (written earlier
// in the same transaction for the new row) stay.
func purgeStatement(r *ttl.Rule, key []string) string {
	var match []string
	for _, c := range key {
		q := ttl.QuoteIdent(c)
		match = append(match, fmt.Sprintf("t.%s = NEW.%s", q, q))
	}
	del := fmt.Sprintf("DELETE FROM %s AS t WHERE %s AND %s",
		r.QuotedName(), strings.Join(match, " AND "), r.ExpiredCondition("t", ttl.Now))
	if r.RuleKind() != ttl.KindSidecar {
		return del
	}
	var ret, join []string
	for _, c := range r.KeyColumns {
		q := ttl.QuoteIdent(c)
		ret = append(ret, "t."+q)
		join = append(join, fmt.Sprintf("r.%s = d.%s", q, q))
	}
	// The registry row's own expiry, by the same shared definition: a column
	// rule on its expires_at.
	reg := ttl.Rule{Schema: sidecarSchema(r), Table: r.SidecarTable, Column: "expires_at"}
	return fmt.Sprintf("WITH d AS (%s RETURNING %s) DELETE FROM %s AS r USING d WHERE %s AND %s",
		del, strings.Join(ret, ", "), r.SidecarName(), strings.Join(join, " AND "), reg.ExpiredCondition("r", ttl.Now))
}

func sidecarSchema(r *ttl.Rule) string {
	if r.SidecarSchema != "" {
		return r.SidecarSchema
	}
	return r.SchemaName()
}

// rowOf returns ROW(rec."a", rec."b"): a row comparison with IS DISTINCT
// FROM treats NULL key values as equal to each other, so a key that stays
// NULL is not a change.
func rowOf(rec string, cols []string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = rec + "." + ttl.QuoteIdent(c)
	}
	return "ROW(" + strings.Join(parts, ", ") + ")"
}

func dropTable(r *ttl.Rule) []string {
	table := r.QuotedName()
	return []string{
		fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", ttl.QuoteIdent(InsertTrigger), table),
		fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s", ttl.QuoteIdent(UpdateTrigger), table),
		"DROP FUNCTION IF EXISTS " + qualifiedFunction(r) + "()",
	}
}

// cleanup drops what earlier installs left for tables no longer configured
// (every trigger calling a ttlproxy.purge_expired__* function, then those
// functions), and the schema when nothing else is in it.
const cleanup = `DO $ttl$
DECLARE
  x record;
BEGIN
  FOR x IN
    SELECT tg.tgname, tg.tgrelid::pg_catalog.regclass AS rel
    FROM pg_catalog.pg_trigger tg
    JOIN pg_catalog.pg_proc p ON p.oid = tg.tgfoid
    JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'ttlproxy' AND p.proname LIKE 'purge\_expired\_\_%'
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', x.tgname, x.rel);
  END LOOP;
  FOR x IN
    SELECT p.oid::pg_catalog.regprocedure AS fn
    FROM pg_catalog.pg_proc p
    JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = 'ttlproxy' AND p.proname LIKE 'purge\_expired\_\_%'
  LOOP
    EXECUTE pg_catalog.format('DROP FUNCTION %s', x.fn);
  END LOOP;
  BEGIN
    DROP SCHEMA IF EXISTS ttlproxy;
  EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege THEN
    NULL; -- in use by something else, or not ours: leave it
  END;
END
$ttl$`

// dollarQuote quotes body with a dollar-quote tag that does not occur in it
// (the body holds user identifiers, which may contain anything).
func dollarQuote(body string) string {
	tag := "$ttl$"
	for i := 1; strings.Contains(body, tag); i++ {
		tag = fmt.Sprintf("$ttl%d$", i)
	}
	return tag + "\n" + body + tag
}
