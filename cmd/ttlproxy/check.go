package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// Check statuses.
const (
	checkOK   = "ok"
	checkWarn = "warn"
	checkFail = "fail"
)

// checkResult is one finding.
type checkResult struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// tableReport is the findings for one TTL table.
type tableReport struct {
	Table  string        `json:"table"`
	Rule   string        `json:"rule"`
	Checks []checkResult `json:"checks"`
}

// runCheck checks a configuration against the live database: each TTL
// table, its expiry column and index, the sidecar registry's key, stamping,
// the sweeper's privileges, and the paths inside the server that read it;
// then the database's DDL events and auth query function.
// It exits 0 when every check is ok, 1 otherwise.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", "--config FILE [--dsn URL] [--format text|json]", stderr)
	configPath := fs.String("config", "", "configuration `file` (required)")
	dsn := fs.String("dsn", "", "connection `string` to check with; default: the sweeper's DSN")
	format := fs.String("format", "text", "output `format`: text or json")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	if *configPath == "" {
		return usageError(fs, "--config is required")
	}
	if *format != "text" && *format != "json" {
		return usageError(fs, "--format: want text or json, got %q", *format)
	}
	cfg, err := config.Load(*configPath)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy check: %v\n", err)
		return exitFailure
	}
	if *dsn == "" && cfg.Sweeper != nil {
		*dsn = cfg.Sweeper.DSN
	}
	if *dsn == "" {
		return usageError(fs, "--dsn is required when the configuration has no sweeper")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy check: connecting: %v\n", err)
		return exitFailure
	}
	defer conn.Close(context.WithoutCancel(ctx))
	sweeperUser := ""
	if cfg.Sweeper != nil {
		if sc, err := pgx.ParseConfig(cfg.Sweeper.DSN); err == nil {
			sweeperUser = sc.User
		}
	}
	reports, err := checkTables(ctx, conn, cfg, sweeperUser)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy check: %v\n", err)
		return exitFailure
	}
	events, err := checkDDLEvents(ctx, conn, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy check: DDL events: %v\n", err)
		return exitFailure
	}
	reports = append(reports, events)
	auth, err := checkAuthQuery(ctx, conn)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy check: auth query: %v\n", err)
		return exitFailure
	}
	reports = append(reports, auth)
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(reports)
	} else {
		printReports(stdout, reports)
	}
	for _, r := range reports {
		for _, c := range r.Checks {
			if c.Status != checkOK {
				return exitFailure
			}
		}
	}
	return exitOK
}

func printReports(w io.Writer, reports []tableReport) {
	for i, r := range reports {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s (%s)\n", r.Table, r.Rule)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range r.Checks {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Check, strings.ToUpper(c.Status), c.Detail)
		}
		_ = tw.Flush()
	}
}

// checkTables runs every check on every configured table.
func checkTables(ctx context.Context, conn *pgx.Conn, cfg *config.Config, sweeperUser string) ([]tableReport, error) {
	paths, err := readLeakPaths(ctx, conn, cfg.Tables)
	if err != nil {
		return nil, fmt.Errorf("reading views and functions: %w", err)
	}
	views, err := newViewReads(ctx, conn, cfg, paths)
	if err != nil {
		return nil, fmt.Errorf("reading the tables' columns for their views: %w", err)
	}
	var out []tableReport
	for i := range cfg.Tables {
		r := &cfg.Tables[i]
		rep := tableReport{Table: r.QualifiedName(), Rule: describeRule(r)}
		add := func(check, status, detail string) {
			rep.Checks = append(rep.Checks, checkResult{Check: check, Status: status, Detail: detail})
		}
		cols, exists, err := tableColumns(ctx, conn, r.QuotedName())
		if err != nil {
			return nil, err
		}
		if !exists {
			add("table exists", checkFail, "no such table")
			out = append(out, rep)
			continue
		}
		add("table exists", checkOK, "")
		checkColumns(r, cols, add)
		if err := checkIndex(ctx, conn, r, add); err != nil {
			return nil, err
		}
		if r.RuleKind() == ttl.KindSidecar {
			if err := checkRegistry(ctx, conn, r, add); err != nil {
				return nil, err
			}
		}
		if sweeperUser != "" {
			if err := checkPrivileges(ctx, conn, r, sweeperUser, add); err != nil {
				return nil, err
			}
		}
		checkPaths(r, paths, views, cfg.TrustedFunctions, add)
		if err := checkRowSecurity(ctx, conn, r, cfg.RowSecurity == config.RowSecurityRequired, add); err != nil {
			return nil, err
		}
		out = append(out, rep)
	}
	return out, nil
}

// describeRule spells the row rule and, after "; expiring:", the column
// rules: "column expires_at timestamptz; expiring: client_ip until
// client_ip_expires_at timestamptz, note at created_at + 8760h0m0s"; a
// table with no row rule reads "no row rule; expiring: …".
func describeRule(r *ttl.Rule) string {
	s := describeRowRule(r)
	for i := range r.Columns {
		sep := ", "
		if i == 0 {
			sep = "; expiring: "
		}
		c := &r.Columns[i]
		if c.Kind() == ttl.KindDerived {
			s += sep + c.Column + " at " + c.BaseColumn + " + " + c.ExpireAfter.String()
			continue
		}
		t := string(c.ColumnType)
		if t == "" {
			t = string(ttl.TypeTimestamptz)
		}
		s += sep + c.Column + " until " + c.ExpiresAtColumn + " " + t
	}
	return s
}

func describeRowRule(r *ttl.Rule) string {
	switch r.RuleKind() {
	case ttl.KindDerived:
		if r.IntervalColumn != "" {
			return "derived: " + r.BaseColumn + " + " + r.IntervalColumn
		}
		return "derived: " + r.BaseColumn + " + " + r.ExpireAfter.String()
	case ttl.KindSidecar:
		return "sidecar: " + r.SidecarSchemaName() + "." + r.SidecarTable
	case ttl.KindNone:
		return "no row rule"
	}
	t := string(r.ColumnType)
	if t == "" {
		t = string(ttl.TypeTimestamptz)
	}
	return "column " + r.ExpiryColumn() + " " + t
}

// column is one column as the catalog describes it.
type column struct {
	typ, def  string
	generated bool
}

func tableColumns(ctx context.Context, conn *pgx.Conn, quoted string) (map[string]column, bool, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod),
		       COALESCE(pg_catalog.pg_get_expr(d.adbin, d.adrelid), ''), a.attgenerated <> ''
		  FROM pg_catalog.pg_attribute a
		  LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE a.attrelid = pg_catalog.to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, quoted)
	if err != nil {
		return nil, false, err
	}
	cols := map[string]column{}
	for rows.Next() {
		var name string
		var c column
		if err := rows.Scan(&name, &c.typ, &c.def, &c.generated); err != nil {
			return nil, false, err
		}
		cols[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	var exists bool
	err = conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", quoted).Scan(&exists)
	return cols, exists, err
}

// wantTypes are the column types a rule's expiry column may have.
var wantTypes = map[ttl.ColumnType][]string{
	"":                       {"timestamp with time zone"},
	ttl.TypeTimestamptz:      {"timestamp with time zone"},
	ttl.TypeTimestamp:        {"timestamp without time zone"},
	ttl.TypeDate:             {"date"},
	ttl.TypeUnixSeconds:      {"bigint", "integer", "numeric"},
	ttl.TypeUnixMilliseconds: {"bigint", "numeric"},
	ttl.TypeUnixMicroseconds: {"bigint", "numeric"},
	ttl.TypeUnixNanoseconds:  {"bigint", "numeric"},
}

func checkColumns(r *ttl.Rule, cols map[string]column, add func(check, status, detail string)) {
	want := map[string][]string{}
	switch r.RuleKind() {
	case ttl.KindColumn:
		want[r.ExpiryColumn()] = wantTypes[r.ColumnType]
	case ttl.KindDerived:
		want[r.BaseColumn] = []string{"timestamp with time zone"}
		if r.IntervalColumn != "" {
			want[r.IntervalColumn] = []string{"interval"}
			if r.IntervalSeconds {
				want[r.IntervalColumn] = []string{"bigint", "integer", "numeric"}
			}
		}
	case ttl.KindSidecar:
		for _, k := range r.KeyColumns {
			want[k] = nil
		}
	}
	// An expiring column may have any type; its expiry, the row rule's.
	for i := range r.Columns {
		c := &r.Columns[i]
		want[c.Column] = nil
		if c.Kind() == ttl.KindDerived {
			want[c.BaseColumn] = []string{"timestamp with time zone"}
		} else {
			want[c.ExpiresAtColumn] = wantTypes[c.ColumnType]
		}
	}
	if len(r.Columns) > 0 {
		names := make([]string, len(r.Columns))
		for i := range r.Columns {
			names[i] = r.Columns[i].Column
		}
		add("expiring columns", checkOK, strings.Join(names, ", ")+" read as NULL once expired in every clause; the few positions the proxy cannot rewrite (a join USING them, an unqualified name beside a table of unknown columns) are refused (0A000)")
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}) {
		c, ok := cols[name]
		switch {
		case !ok:
			add("column "+name, checkFail, "no such column")
		case want[name] != nil && !slices.ContainsFunc(want[name], func(t string) bool { return strings.HasPrefix(c.typ, t) }):
			add("column "+name, checkFail, fmt.Sprintf("type %s, the rule wants %s", c.typ, strings.Join(want[name], " or ")))
		default:
			add("column "+name, checkOK, c.typ)
		}
	}
	if col := r.StampColumn(); col != "" && r.DefaultTTL > 0 {
		switch c, ok := cols[col]; {
		case !ok:
		case c.generated:
			add("default_ttl stamping", checkFail, col+" is a generated column: INSERT cannot set it")
		case c.def != "":
			add("default_ttl stamping", checkWarn, col+" has DEFAULT "+c.def+", which stamping replaces for rows inserted through the proxy")
		default:
			add("default_ttl stamping", checkOK, "")
		}
	}
}

// checkIndex checks the indexes the sweeper reads: on the expiry column
// (the base column of a derived rule; none for a sidecar rule or a table
// with no row rule), and on the expiry column of each
// expiring column that has one of its own, through which the sweeper finds
// the values to set to NULL.
func checkIndex(ctx context.Context, conn *pgx.Conn, r *ttl.Rule, add func(check, status, detail string)) error {
	col := r.ExpiryColumn()
	switch r.RuleKind() {
	case ttl.KindDerived:
		col = r.BaseColumn
	case ttl.KindSidecar, ttl.KindNone:
		col = ""
	}
	if col != "" {
		if err := checkIndexOn(ctx, conn, r, col, "none: the sweeper and every filtered read scan the table", add); err != nil {
			return err
		}
	}
	for i := range r.Columns {
		if c := &r.Columns[i]; c.Kind() == ttl.KindColumn {
			if err := checkIndexOn(ctx, conn, r, c.ExpiresAtColumn, "none: each sweep of "+c.Column+"'s expired values scans the table", add); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkIndexOn reports the index led by r's column col, or none (warn,
// saying why with missing).
func checkIndexOn(ctx context.Context, conn *pgx.Conn, r *ttl.Rule, col, missing string, add func(check, status, detail string)) error {
	var index string
	err := conn.QueryRow(ctx, `SELECT COALESCE((SELECT c.relname::text FROM pg_catalog.pg_index i
		  JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
		  JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		 WHERE i.indrelid = pg_catalog.to_regclass($1) AND a.attname = $2 LIMIT 1), '')`, r.QuotedName(), col).Scan(&index)
	if err != nil {
		return err
	}
	if index == "" {
		add("index on "+col, checkWarn, missing)
	} else {
		add("index on "+col, checkOK, index)
	}
	return nil
}

func checkRegistry(ctx context.Context, conn *pgx.Conn, r *ttl.Rule, add func(check, status, detail string)) error {
	reg := r.SidecarName()
	var exists, unique bool
	err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL,
		EXISTS (SELECT FROM pg_catalog.pg_index i WHERE i.indrelid = pg_catalog.to_regclass($1) AND i.indisunique
		          AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indnkeyatts = $3
		          AND (SELECT pg_catalog.array_agg(a.attname::text ORDER BY a.attname)
		                 FROM pg_catalog.pg_attribute a
		                WHERE a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey::int2[])) = $2)`,
		reg, slices.Sorted(slices.Values(r.KeyColumns)), len(r.KeyColumns)).Scan(&exists, &unique)
	if err != nil {
		return err
	}
	switch {
	case !exists:
		add("sidecar registry", checkFail, reg+" does not exist")
	case !unique:
		add("sidecar registry", checkFail, reg+" has no unique key on ("+strings.Join(r.KeyColumns, ", ")+"): INSERT … ON CONFLICT fails with 42P10")
	default:
		add("sidecar registry", checkOK, reg)
	}
	return nil
}

func checkPrivileges(ctx context.Context, conn *pgx.Conn, r *ttl.Rule, user string, add func(check, status, detail string)) error {
	var missing []string
	// A table with no row rule is never deleted from: its values are set
	// to NULL.
	privs := []string{"SELECT", "UPDATE", "DELETE"}
	if !r.HasRowRule() {
		privs = privs[:2]
	}
	for _, p := range privs {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT pg_catalog.has_table_privilege($1, pg_catalog.to_regclass($2), $3)", user, r.QuotedName(), p).Scan(&ok)
		if err != nil {
			add("sweeper privileges", checkFail, err.Error())
			return nil
		}
		if !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		add("sweeper privileges", checkFail, user+" lacks "+strings.Join(missing, ", "))
	} else {
		add("sweeper privileges", checkOK, user+": "+strings.Join(privs, ", "))
	}
	return nil
}

// readLeakPaths runs the proxy's statements for the paths inside the
// server.
func readLeakPaths(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule) (proxy.LeakPaths, error) {
	if len(rules) == 0 {
		return proxy.LeakPaths{}, nil
	}
	viewsSQL, funcsSQL := proxy.LeakPathStatements(rules)
	var results [2][][]string
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
			return err
		}
		for i, q := range []string{viewsSQL, funcsSQL} {
			rows, err := tx.Query(ctx, q, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				return err
			}
			for rows.Next() {
				vals := rows.RawValues()
				row := make([]string, len(vals))
				for j, v := range vals {
					row[j] = string(v)
				}
				results[i] = append(results[i], row)
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return proxy.LeakPaths{}, err
	}
	return proxy.BuildLeakPaths(results[0], results[1]), nil
}

// checkPaths lists the views, materialized views, functions, rules and
// triggers that read r's table inside the server, with what the proxy does
// for each.
func checkPaths(r *ttl.Rule, paths proxy.LeakPaths, views *viewReads, trusted []string, add func(check, status, detail string)) {
	leaky := rewrite.NewCatalog(rewrite.CatalogData{Views: paths.Views}).Leaky()
	name := r.QualifiedName()
	reads := func(v rewrite.View) bool {
		for _, x := range v.Reads {
			if x == name {
				return true
			}
			if w, ok := paths.Views[x]; ok && slices.Contains(w.Reads, name) {
				return true
			}
		}
		return false
	}
	found := false
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range paths.Views {
			if !yield(k) {
				return
			}
		}
	}) {
		v := paths.Views[key]
		if !reads(v) {
			continue
		}
		found = true
		_, leaks := leaky[key]
		switch {
		case len(r.Columns) > 0 && !v.Materialized:
			// docs/design/column-ttl.md §5: whether the definition reads
			// the values as the proxy does decides; the rewriter answers.
			switch expanded, refused := views.read(key); {
			case refused != "":
				add("view "+key, checkWarn, "reads are refused (0A000): "+refused)
			case expanded:
				add("view "+key, checkOK, "reads are expanded into its rewritten definition, expired values read as NULL; writes through it are refused (0A000)")
			default:
				add("view "+key, checkOK, "read as it is: its definition reads the expiring columns as NULL once expired, as a view created through the proxy does")
			}
		case !leaks:
			add("view "+key, checkOK, "created through the proxy: its definition holds the filter")
		case v.Materialized:
			add("materialized view "+key, checkWarn, "reads are refused (0A000): its rows were live at its last refresh")
		case v.ReadsRowSecurity && !v.SecurityInvoker:
			add("view "+key, checkWarn, "reads are refused (0A000): it reads a table with row security; make it security_invoker")
		default:
			add("view "+key, checkOK, "reads are expanded into its filtered definition")
		}
	}
	// A function reads a relation name: the table, a view of it, or another
	// function's name (it calls it).
	viewNames := map[string]bool{}
	for key, v := range paths.Views {
		if reads(v) {
			viewNames[key[strings.LastIndexByte(key, '.')+1:]] = true
		}
	}
	fnReads := func(fn string) bool {
		what := paths.Functions[fn]
		for range 16 {
			if what == r.Table || viewNames[what] {
				return true
			}
			next := ""
			for other, w := range paths.Functions {
				if other[strings.LastIndexByte(other, '.')+1:] == what {
					next = w
					break
				}
			}
			if next == "" {
				return false
			}
			what = next
		}
		return false
	}
	for _, fn := range slices.Sorted(func(yield func(string) bool) {
		for k := range paths.Functions {
			if !yield(k) {
				return
			}
		}
	}) {
		if !fnReads(fn) {
			continue
		}
		found = true
		short := fn[strings.LastIndexByte(fn, '.')+1:]
		switch {
		case paths.TriggerTables[fn] != "":
			add("trigger function "+fn, checkWarn, "runs on "+paths.TriggerTables[fn]+" inside the server, seeing expired rows (ttlproxy install --row-security filters it)")
		case slices.Contains(trusted, fn) || slices.Contains(trusted, short):
			add("function "+fn, checkOK, "trusted (trusted_functions): called as written, sees expired rows")
		default:
			add("function "+fn, checkWarn, "calls are refused (0A000) unless listed in trusted_functions")
		}
	}
	for _, rule := range paths.Rules {
		if strings.HasSuffix(rule, " reads "+name) {
			found = true
			add("rule on "+strings.SplitN(rule, " ", 2)[0], checkWarn, "reads "+name+" inside the server, seeing expired rows (ttlproxy install --row-security filters it)")
		}
	}
	if !found {
		add("paths inside the server", checkOK, "no view, function, rule or trigger reads it")
	}
}
