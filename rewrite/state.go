package rewrite

import (
	"encoding/binary"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// The rewriter's input besides the rules and the text: what one client
// session's settings and its database's catalog make a statement mean. The
// proxy describes it in a Session and freezes it with NewState whenever it
// changes; a State never changes, and its fingerprint, computed once,
// numbers its facts for the rewrite cache and the proxy's prepared
// statements (ARCHITECTURE.md, "The rewrite contract").

// Session describes the per-connection facts that change what a statement
// means. It is a plain value: NewState copies what it needs.
type Session struct {
	// SearchPath is the session's effective search_path, schemas in order,
	// "$user" already replaced; nil means ["public"].
	SearchPath []string
	// TTL overrides every rule's DefaultTTL for stamping (SET ttlproxy.ttl);
	// nil means no override.
	TTL *time.Duration
	// TTLInvalid holds the server's ttlproxy.ttl when it is set to text
	// ttl.ParseTTLSetting rejects (set where the proxy could not check it,
	// e.g. ALTER ROLE … SET or set_config with a parameter); statements that
	// would stamp are then rejected with SQLSTATE 22023. "" when valid or
	// unset.
	TTLInvalid string
	// Bypass disables filtering and stamping (a role in bypass_roles).
	Bypass bool
	// The facts that let a text's own changes of role and settings be
	// followed (follow.go); "" when unknown, which leaves such changes
	// unfollowed. SearchPathSetting is search_path as the server holds it
	// ("$user" unexpanded); CurrentUser and SessionUser are current_user and
	// session_user; ResetSearchPath and ResetTTL are what RESET restores
	// (pg_settings.reset_val), valid when ResetKnown.
	SearchPathSetting, CurrentUser, SessionUser string
	ResetSearchPath, ResetTTL                   string
	ResetKnown                                  bool
	// Catalog describes the TTL tables in the session's database; nil when
	// unknown.
	Catalog *Catalog
	// NoUsage are the schemas holding a relation named like a TTL table on
	// which current_user has no USAGE: the server skips them on the search
	// path (namespace.c, recomputeNamespacePath), and so does resolution.
	// UsageUnknown: the role has changed since they were read (a SET ROLE
	// followed through a text); a schema holding the name without a rule
	// for it is then skipped, which errs toward filtering.
	NoUsage      []string
	UsageUnknown bool
}

// State is an immutable snapshot of a Session, the rewriter's input. Build
// one with NewState whenever the session's facts change; it is safe for
// concurrent use. A nil *State is the default session (search_path public,
// no override, no catalog).
type State struct {
	s  Session
	fp uint64
}

// NewState freezes s: it copies the search path and the TTL override, so
// changing s afterwards does not change the State, and computes the
// fingerprint.
func NewState(s Session) *State {
	st := &State{s: s}
	st.s.SearchPath = slices.Clone(s.SearchPath)
	st.s.NoUsage = slices.Clone(s.NoUsage)
	st.s.TTL = nil
	if s.TTL != nil {
		d := *s.TTL
		st.s.TTL = &d
	}
	st.fp = registry.number(appendSessionFacts([]byte{'S'}, &st.s))
	return st
}

// defaultState is the State of a nil *State.
var defaultState = NewState(Session{})

// Fingerprint numbers the State's facts: two States get the same number only
// when every text rewrites alike under both, so a caller that keeps
// rewritten statements (prepared statements) rewrites them again when the
// number changes. Numbers are never reused in a process; equal facts may get
// a new number after maxFingerprints distinct ones have been seen.
func (st *State) Fingerprint() uint64 {
	if st == nil {
		return defaultState.fp
	}
	return st.fp
}

// Session returns a copy of the facts the State was built from.
func (st *State) Session() Session {
	if st == nil {
		st = defaultState
	}
	s := st.s
	s.SearchPath = slices.Clone(s.SearchPath)
	s.NoUsage = slices.Clone(s.NoUsage)
	if s.TTL != nil {
		d := *s.TTL
		s.TTL = &d
	}
	return s
}

// appendSessionFacts encodes everything a rewrite depends on besides the
// rules and the text: the search path, the TTL override (and an unreadable
// one), bypass, and the catalog's number. Every part is length-prefixed, so
// two different sessions never encode alike.
func appendSessionFacts(b []byte, s *Session) []byte {
	if s.SearchPath == nil {
		b = append(b, 'D')
	} else {
		b = append(b, 'P')
		b = binary.AppendUvarint(b, uint64(len(s.SearchPath)))
		for _, p := range s.SearchPath {
			b = appendString(b, p)
		}
	}
	if s.TTL == nil {
		b = append(b, 'N')
	} else {
		b = append(b, 'T')
		b = binary.AppendVarint(b, int64(*s.TTL))
	}
	if s.TTLInvalid != "" {
		b = append(b, 'X')
		b = appendString(b, s.TTLInvalid)
	}
	if s.Bypass {
		b = append(b, 'B')
	}
	b = append(b, 'U')
	for _, v := range []string{s.SearchPathSetting, s.CurrentUser, s.SessionUser, s.ResetSearchPath, s.ResetTTL} {
		b = appendString(b, v)
	}
	if s.ResetKnown {
		b = append(b, 'R')
	}
	b = append(b, 'G')
	b = binary.AppendUvarint(b, uint64(len(s.NoUsage)))
	for _, n := range s.NoUsage {
		b = appendString(b, n)
	}
	if s.UsageUnknown {
		b = append(b, 'Q')
	}
	if s.Catalog == nil {
		b = append(b, 'N')
	} else {
		b = append(b, 'C')
		b = binary.AppendUvarint(b, s.Catalog.id)
	}
	return b
}

func appendString(b []byte, v string) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// CatalogData is what the proxy learned from the server about the TTL
// tables, as NewCatalog takes it and Catalog.Data returns it.
type CatalogData struct {
	// Tables by qualified name "schema.table": the TTL tables and their
	// children.
	Tables map[string]*TableInfo
	// Schemas lists, for each relation name that is also the name of a TTL
	// table or of one of Children, every schema holding a relation of that
	// name.
	Schemas map[string][]string
	// Children maps each inheritance child and partition of a TTL table, at
	// any depth, "schema.table", to the qualified name (Rule.QualifiedName)
	// of the TTL table whose rule it follows. A child is filtered, stamped
	// and registered like its ancestor (same expiry column; a sidecar rule
	// keeps the ancestor's registry); Tables should hold its columns, which
	// may be ordered differently.
	Children map[string]string
	// Ancestors maps each inheritance parent (at any depth) of a TTL table
	// or of one of Children that is neither itself, "schema.table", to a
	// TTL descendant whose rows a read of it returns. Such a parent is
	// refused unless read with ONLY: its own rows carry no expiry, and the
	// rows it returns of its descendants are not filtered.
	Ancestors map[string]string
	// Views are the views and materialized views that read a TTL table, one
	// of Children or another of Views inside the server, by "schema.name".
	// NewCatalog decides which of them leak expired rows (leaky.go).
	Views map[string]View
	// Functions are the functions and procedures whose bodies may read a
	// TTL table, one of Views or another of Functions, by "schema.name",
	// with the name of what they read. The server's dependencies find SQL
	// function bodies exactly; other languages are matched by name in their
	// source, which errs toward listing.
	Functions map[string]string
	// State is what Options.ClassifyState needs to call a statement
	// state-free; nil: no statement that names a relation, a function, an
	// operator or a type is.
	State *StateCatalog
}

// StateCatalog lists, by unqualified name (any schema), the user objects a
// statement may reach (docs/design/pooling.md §9). Names err toward dirty:
// a call, operator or cast is state-free only when no user object of its
// name exists, whatever the search_path.
type StateCatalog struct {
	// Relations maps each relation name (pg_class.relname of tables,
	// partitioned tables, views, materialized views, foreign tables and
	// sequences, system ones included) to true when no relation of that
	// name carries user code: a non-internal trigger, a rule other than a
	// view's _RETURN, a policy, a default, check, generated column, index
	// expression or domain check that calls a user function, or, for a
	// view, a query that reaches such a relation or a user function. A
	// name absent here (a relation made after the catalog was read) is not
	// state-free.
	Relations map[string]bool
	// UserFunctions, UserOperators and UserTypes hold the names (proname,
	// oprname, typname) of functions, procedures and aggregates, operators
	// and types whose OID is FirstNormalObjectId (16384) or above.
	UserFunctions, UserOperators, UserTypes map[string]bool
}

// View is a view or materialized view that reads a TTL table inside the
// server.
type View struct {
	// Materialized: its rows were computed at its last refresh.
	Materialized bool
	// Reads lists what it reads directly, "schema.name": TTL tables, their
	// children and other Views.
	Reads []string
	// Definition is pg_get_viewdef's text of a view, every name qualified;
	// "" for a materialized view.
	Definition string
	// Columns are the view's column names in order.
	Columns []string
	// SecurityBarrier and SecurityInvoker are the view's options.
	SecurityBarrier, SecurityInvoker bool
	// ReadsRowSecurity: a table it reads directly has row security
	// enabled, whose policies apply to the view's owner, not the reader.
	ReadsRowSecurity bool
}

// TableInfo describes one table.
type TableInfo struct {
	// Columns in attnum order, dropped columns omitted.
	Columns []Column
	// UniqueKeys lists the column sets of unique indexes and constraints.
	UniqueKeys [][]string
	// RowSecurity is the table's row-level security as the catalog has it.
	RowSecurity RowSecurity
}

// RowSecurity is what the catalog says of one table's row-level security,
// as ttlproxy install --row-security leaves it.
type RowSecurity struct {
	// Enabled and Forced are pg_class.relrowsecurity and
	// relforcerowsecurity.
	Enabled, Forced bool
	// Policy: the table carries the live policy (ttlproxy_live,
	// RESTRICTIVE, FOR ALL, TO PUBLIC). Condition is the fingerprint its
	// comment records (ttl.Rule.PolicyFingerprint; "" when none).
	Policy    bool
	Condition string
}

// Protects reports whether rs holds the live condition of r's row rule in
// the server: row security enabled and forced, with the live policy of the
// rule as it is now; "" when it does, else what is missing.
func (rs RowSecurity) Protects(r *ttl.Rule) string {
	switch {
	case !rs.Enabled:
		return "row security is not enabled"
	case !rs.Forced:
		return "row security is not forced"
	case !rs.Policy:
		return "the live policy is missing"
	case rs.Condition != r.PolicyFingerprint():
		return "the live policy holds another condition than the rule's"
	}
	return ""
}

// Column is one table column.
type Column struct {
	Name string
	Type string // format_type() output, e.g. "timestamp with time zone"
}

// Catalog is an immutable snapshot of CatalogData, made by NewCatalog and
// shared by the States of one database's sessions. Equal content gets the
// same number in States' fingerprints, so equal Catalogs built for different
// sessions share rewrite cache entries.
type Catalog struct {
	d CatalogData
	// id numbers the content (registry).
	id uint64
	// children matches the children's names in raw text (the cheap check);
	// childKeys are the Children keys, sorted.
	children  matcher
	childKeys []string
	// leaky holds the Views that may return expired rows, with what they
	// read; leakyNames matches their names, the Functions' and the
	// Ancestors' in raw text.
	leaky      map[string]string
	leakyNames matcher
	// ancestorNames matches the Ancestors' names in raw text (a function
	// body); ancestorKeys are the Ancestors keys, sorted, its owners.
	ancestorNames matcher
	ancestorKeys  []string
	// viewKeys holds the Views' "schema.name" keys (values empty);
	// viewNames matches their names in raw text.
	viewKeys  map[string]string
	viewNames matcher
	// viewNamed holds the Views' names, functionsNamed the Functions' keys
	// by name (qualify.go).
	viewNamed      map[string]bool
	functionsNamed map[string][]string
}

// NewCatalog copies d, so changing d afterwards does not change the
// Catalog, and indexes it.
func NewCatalog(d CatalogData) *Catalog {
	c := &Catalog{d: d.clone()}
	for k := range c.d.Children {
		c.childKeys = append(c.childKeys, k)
		// "schema.table": either name may hold a dot; both readings are
		// needles, which can only make the check parse more often.
		for _, name := range childNames(k) {
			c.children.add(name, 0)
			if strings.Contains(name, `"`) {
				c.children.add(strings.ReplaceAll(name, `"`, `""`), 0)
			}
		}
	}
	sort.Strings(c.childKeys)
	c.leaky = leakyViews(c.d.Views)
	c.viewKeys = make(map[string]string, len(c.d.Views))
	for k := range c.d.Views {
		c.viewKeys[k] = ""
		for _, name := range childNames(k) {
			c.viewNames.add(name, 0)
			if strings.Contains(name, `"`) {
				c.viewNames.add(strings.ReplaceAll(name, `"`, `""`), 0)
			}
		}
	}
	for _, m := range []map[string]string{c.leaky, c.d.Functions, c.d.Ancestors} {
		for k := range m {
			for _, name := range childNames(k) {
				c.leakyNames.add(name, 0)
				if strings.Contains(name, `"`) {
					c.leakyNames.add(strings.ReplaceAll(name, `"`, `""`), 0)
				}
			}
		}
	}
	c.ancestorKeys = slices.Sorted(maps.Keys(c.d.Ancestors))
	for i, k := range c.ancestorKeys {
		for _, name := range childNames(k) {
			c.ancestorNames.add(name, i)
			if strings.Contains(name, `"`) {
				c.ancestorNames.add(strings.ReplaceAll(name, `"`, `""`), i)
			}
		}
	}
	c.indexNames()
	c.id = registry.number(c.appendFacts([]byte{'C'}))
	return c
}

// Leaky returns the Views that may return expired rows (a view created
// through the proxy carries the filter and does not), each with the
// relation whose rows make it leak.
func (c *Catalog) Leaky() map[string]string { return maps.Clone(c.leaky) }

// Data returns a copy of the Catalog's content.
func (c *Catalog) Data() CatalogData { return c.d.clone() }

func (d CatalogData) clone() CatalogData {
	out := CatalogData{Children: maps.Clone(d.Children), Ancestors: maps.Clone(d.Ancestors), Functions: maps.Clone(d.Functions)}
	if d.Views != nil {
		out.Views = make(map[string]View, len(d.Views))
		for k, v := range d.Views {
			v.Reads, v.Columns = slices.Clone(v.Reads), slices.Clone(v.Columns)
			out.Views[k] = v
		}
	}
	if d.Tables != nil {
		out.Tables = make(map[string]*TableInfo, len(d.Tables))
		for k, t := range d.Tables {
			if t == nil {
				out.Tables[k] = nil
				continue
			}
			u := &TableInfo{Columns: slices.Clone(t.Columns), RowSecurity: t.RowSecurity}
			for _, key := range t.UniqueKeys {
				u.UniqueKeys = append(u.UniqueKeys, slices.Clone(key))
			}
			out.Tables[k] = u
		}
	}
	if d.Schemas != nil {
		out.Schemas = make(map[string][]string, len(d.Schemas))
		for k, v := range d.Schemas {
			out.Schemas[k] = slices.Clone(v)
		}
	}
	if d.State != nil {
		out.State = &StateCatalog{
			Relations:     maps.Clone(d.State.Relations),
			UserFunctions: maps.Clone(d.State.UserFunctions),
			UserOperators: maps.Clone(d.State.UserOperators),
			UserTypes:     maps.Clone(d.State.UserTypes),
		}
	}
	return out
}

// appendFacts encodes the whole content, maps in key order.
func (c *Catalog) appendFacts(b []byte) []byte {
	for _, k := range slices.Sorted(maps.Keys(c.d.Tables)) {
		b = appendString(b, k)
		t := c.d.Tables[k]
		if t == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = binary.AppendUvarint(b, uint64(len(t.Columns)))
		for _, col := range t.Columns {
			b = appendString(appendString(b, col.Name), col.Type)
		}
		b = binary.AppendUvarint(b, uint64(len(t.UniqueKeys)))
		for _, key := range t.UniqueKeys {
			b = binary.AppendUvarint(b, uint64(len(key)))
			for _, col := range key {
				b = appendString(b, col)
			}
		}
		rs := t.RowSecurity
		flags := byte(0)
		for i, f := range []bool{rs.Enabled, rs.Forced, rs.Policy} {
			if f {
				flags |= 1 << i
			}
		}
		b = appendString(append(b, flags), rs.Condition)
	}
	b = append(b, 0xff)
	for _, k := range slices.Sorted(maps.Keys(c.d.Schemas)) {
		b = appendString(b, k)
		v := c.d.Schemas[k]
		b = binary.AppendUvarint(b, uint64(len(v)))
		for _, s := range v {
			b = appendString(b, s)
		}
	}
	b = append(b, 0xff)
	for _, k := range c.childKeys {
		b = appendString(appendString(b, k), c.d.Children[k])
	}
	b = append(b, 0xff)
	for _, k := range slices.Sorted(maps.Keys(c.d.Ancestors)) {
		b = appendString(appendString(b, k), c.d.Ancestors[k])
	}
	// What the rewrite depends on of Views is which of them leak, and how
	// those expand.
	b = append(b, 0xff)
	for _, k := range slices.Sorted(maps.Keys(c.leaky)) {
		b = appendString(appendString(b, k), c.leaky[k])
		v := c.d.Views[k]
		b = appendString(b, v.Definition)
		b = binary.AppendUvarint(b, uint64(len(v.Columns)))
		for _, col := range v.Columns {
			b = appendString(b, col)
		}
		flags := byte(0)
		for i, f := range []bool{v.Materialized, v.SecurityBarrier, v.SecurityInvoker, v.ReadsRowSecurity} {
			if f {
				flags |= 1 << i
			}
		}
		b = append(b, flags)
	}
	b = append(b, 0xff)
	for _, k := range slices.Sorted(maps.Keys(c.d.Functions)) {
		b = appendString(appendString(b, k), c.d.Functions[k])
	}
	return b
}

// maxFingerprints bounds the registry. Past it the registry starts over with
// new numbers; cache entries under the old ones are evicted as they go
// unused.
const maxFingerprints = 4096

// registry numbers the distinct encoded facts (of States and Catalogs) seen
// by the process, so that a cache key carries a number instead of the facts.
var registry fingerprints

type fingerprints struct {
	mu   sync.Mutex
	ids  map[string]uint64
	next uint64
}

func (f *fingerprints) number(facts []byte) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := f.ids[string(facts)]; ok {
		return id
	}
	if f.ids == nil || len(f.ids) >= maxFingerprints {
		f.ids = make(map[string]uint64)
	}
	f.next++
	f.ids[string(facts)] = f.next
	return f.next
}
