package rewrite

import (
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// followStates returns the session each statement of a text runs under:
// s for the first, then s changed by the statements before it, as the
// server applies them (PostgreSQL's guc.c: a SET lasts for the session
// unless its transaction rolls back, a SET LOCAL until its transaction
// ends; a text without BEGIN runs as one implicit transaction). After a
// change it cannot follow, a statement that may name a TTL table makes the
// whole text rejected (errStateChangeInString). Statements after an error
// do not run in a simple Query, so only the path without errors matters.
func (rw *Rewriter) followStates(sql string, stmts []*pg.RawStmt, s *Session) ([]*Session, *Error) {
	out := make([]*Session, len(stmts))
	if len(stmts) < 2 {
		for i := range out {
			out[i] = s
		}
		return out, nil
	}
	f := follower{sql: sql, bypass: rw.bypass, sess: *s, eff: *s}
	lost := false
	for i, raw := range stmts {
		text := stmtText(sql, raw)
		if lost {
			if what, ok := rw.namesTTL(text, s); ok {
				return nil, errStateChangeInString(what)
			}
			out[i] = s
			continue
		}
		eff := f.eff
		out[i] = &eff
		lost = !f.statement(text, raw.Stmt)
	}
	return out, nil
}

// statement follows one parsed statement of text; false when the values
// after it are not known.
func (f *follower) statement(text string, n *pg.Node) bool {
	if ts := n.GetTransactionStmt(); ts != nil {
		return f.transaction(ts)
	}
	if stmtMayChangeState(text, n) {
		return f.change(n)
	}
	return true
}

// Follower follows the changes of search_path and ttlproxy.ttl through the
// statements of a pipeline (the messages up to one Sync, a pgx batch) as
// the server applies them, as Rewrite does through the statements of one
// text: the proxy rewrites each later statement under the state the ones
// before it leave, without asking the server between them. The changes it
// follows are those Rewrite follows (search_path and ttlproxy.ttl set to
// literals, through transaction blocks opened after the first change).
type Follower struct {
	f    follower
	cur  *State
	lost bool
}

// NewFollower starts following from st (nil: the default session).
func (rw *Rewriter) NewFollower(st *State) *Follower {
	if st == nil {
		st = defaultState
	}
	return &Follower{f: follower{bypass: rw.bypass, sess: st.s, eff: st.s}, cur: st}
}

// Statement follows sql, the text of one statement the server is about to
// run (a Query's, or the one a Bind runs), and returns the State the
// statements after it run under; nil from the first change it cannot
// follow on. Texts are parsed only once a change may be involved.
func (fl *Follower) Statement(sql string) *State {
	if fl.lost {
		return nil
	}
	if !fl.f.changed && !SessionStateMayChange(sql) {
		return fl.cur
	}
	tree, err := pg.Parse(sql)
	if err != nil {
		fl.lost = true
		return nil
	}
	fl.f.sql = sql
	for _, raw := range tree.Stmts {
		if !fl.f.statement(stmtText(sql, raw), raw.Stmt) {
			fl.lost = true
			return nil
		}
	}
	if fl.f.changed {
		if next := NewState(fl.f.eff); next.Fingerprint() != fl.cur.Fingerprint() {
			fl.cur = next
		}
	}
	return fl.cur
}

// follower tracks the session values through one text.
type follower struct {
	sql string
	// bypass is Options.BypassRoles, for SET ROLE.
	bypass map[string]bool
	// sess holds the values a commit keeps; eff adds the SET LOCALs.
	sess, eff Session
	// begin is sess at the BEGIN of a transaction block opened in the text;
	// nil outside one.
	begin *Session
	// changed: a value was changed in the text.
	changed bool
}

// transaction follows a transaction control statement; false when the
// values after it are not known.
func (f *follower) transaction(ts *pg.TransactionStmt) bool {
	switch ts.Kind {
	case pg.TransactionStmtKind_TRANS_STMT_BEGIN, pg.TransactionStmtKind_TRANS_STMT_START:
		if f.begin == nil {
			b := f.sess
			f.begin = &b
		}
		return true
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT:
		f.eff = f.sess
		f.begin = nil
		if ts.Chain {
			b := f.sess
			f.begin = &b
		}
		return true
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		if f.begin == nil {
			// The transaction began before the text (or is the implicit
			// one): what it reverts is not known here.
			return false
		}
		f.sess, f.eff = *f.begin, *f.begin
		f.begin = nil
		if ts.Chain {
			b := f.sess
			f.begin = &b
		}
		return true
	case pg.TransactionStmtKind_TRANS_STMT_SAVEPOINT, pg.TransactionStmtKind_TRANS_STMT_RELEASE:
		return true
	}
	// ROLLBACK TO SAVEPOINT, PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED.
	return false
}

// change follows a statement that may change the state; false when its
// effect is not known from the text.
func (f *follower) change(n *pg.Node) bool {
	if v := n.GetVariableSetStmt(); v != nil {
		switch v.Kind {
		case pg.VariableSetKind_VAR_SET_VALUE:
			return f.set(v.Name, v.Args, v.IsLocal)
		case pg.VariableSetKind_VAR_SET_DEFAULT, pg.VariableSetKind_VAR_RESET:
			// RESET restores the reset value, which the proxy reads with
			// the state; RESET ROLE (SET ROLE NONE) the login role.
			switch strings.ToLower(v.Name) {
			case "search_path":
				return f.sessionKnows(f.eff.ResetKnown) && f.setText("search_path", f.eff.ResetSearchPath, v.IsLocal)
			case ttlSettingName:
				return f.sessionKnows(f.eff.ResetKnown) && f.setText(ttlSettingName, f.eff.ResetTTL, v.IsLocal)
			case "role":
				return f.setText("role", "none", v.IsLocal)
			}
		}
		return false // FROM CURRENT, RESET ALL, other settings that may matter
	}
	if sel := n.GetSelectStmt(); sel != nil && len(sel.TargetList) == 1 && len(sel.FromClause) == 0 &&
		sel.WhereClause == nil && sel.IntoClause == nil && sel.WithClause == nil && len(sel.ValuesLists) == 0 &&
		sel.Op == pg.SetOperation_SETOP_NONE {
		if rt := sel.TargetList[0].GetResTarget(); rt != nil {
			if fc := rt.Val.GetFuncCall(); fc != nil && isSetConfigName(fc) && len(fc.Args) == 3 && fc.AggFilter == nil && fc.Over == nil {
				name, ok1 := stringConst(fc.Args[0])
				value, ok2 := stringConst(fc.Args[1])
				local, ok3 := boolConst(fc.Args[2])
				if ok1 && ok2 && ok3 {
					return f.setText(strings.ToLower(name), value, local)
				}
			}
		}
	}
	return false
}

// set follows SET [LOCAL] name = args.
func (f *follower) set(name string, args []*pg.Node, local bool) bool {
	switch strings.ToLower(name) {
	case "search_path":
		// The server stores an identifier quoted and a string literal as
		// written, joined with ", " (flatten_set_variable_args).
		parts := make([]string, len(args))
		for i, a := range args {
			c := a.GetAConst()
			sv, ok := c.GetVal().(*pg.A_Const_Sval)
			if c == nil || !ok {
				return false
			}
			v := sv.Sval.GetSval()
			if loc := int(c.Location); loc >= 0 && loc < len(f.sql) && (f.sql[loc] == '\'' || f.sql[loc] == 'E' || f.sql[loc] == 'e' || f.sql[loc] == '$') {
				parts[i] = v
			} else {
				parts[i] = `"` + strings.ReplaceAll(v, `"`, `""`) + `"`
			}
		}
		return f.setText("search_path", strings.Join(parts, ", "), local)
	case ttlSettingName, "role":
		if len(args) != 1 {
			return false
		}
		v, ok := constText(args[0])
		if !ok {
			return false
		}
		return f.setText(strings.ToLower(name), v, local)
	}
	return false
}

// sessionKnows returns known, marking the text changed: a change it
// cannot follow still counts as one.
func (f *follower) sessionKnows(known bool) bool {
	f.changed = true
	return known
}

// userMark stands for "$user" while parsing a search path: the current
// user is not part of the session facts.
const userMark = "\x00$user"

// setText applies the text value of a setting.
func (f *follower) setText(name, value string, local bool) bool {
	apply := func(s *Session) bool {
		switch name {
		case "search_path":
			return setPath(s, value, s.CurrentUser)
		case "role":
			// SET ROLE changes current_user, hence "$user" in the path and
			// the bypass (bypass_roles holds current_user or session_user).
			if s.SessionUser == "" || s.SearchPathSetting == "" {
				return false
			}
			role := value
			if strings.EqualFold(role, "none") {
				role = s.SessionUser
			}
			if !setPath(s, s.SearchPathSetting, role) {
				return false
			}
			// USAGE on schemas (Session.NoUsage) is the old role's.
			s.UsageUnknown = s.UsageUnknown || role != s.CurrentUser
			s.CurrentUser = role
			s.Bypass = f.bypass[role] || f.bypass[s.SessionUser]
		case ttlSettingName:
			d, err := ttl.ParseTTLSetting(value)
			if err != nil {
				return false // rejected by checkSettings before
			}
			s.TTL, s.TTLInvalid = d, ""
		default:
			return false
		}
		return true
	}
	f.changed = true
	if !apply(&f.eff) {
		return false
	}
	if !local {
		return apply(&f.sess)
	}
	return true
}

// setPath sets s's search path to the setting value as user sees it:
// "$user" expanded to user. false when user is unknown for a "$user" in it,
// or a temporary relation may shadow a TTL table (pg_temp first).
func setPath(s *Session, value, user string) bool {
	// With a temporary relation shadowing a TTL table the proxy puts pg_temp
	// first; whether the old path held it only for that is not known here.
	if slices.Contains(s.SearchPath, "pg_temp") {
		return false
	}
	if user == "" {
		user = userMark
	}
	path := ttl.ParseSearchPath(value, user)
	if slices.Contains(path, userMark) || slices.Contains(path, "pg_temp") {
		return false
	}
	if path == nil {
		path = []string{}
	}
	s.SearchPath, s.SearchPathSetting = path, value
	return true
}

// boolConst returns the value of a boolean literal, or of 'true'/'false'
// text; ok is false for anything else.
func boolConst(n *pg.Node) (bool, bool) {
	if tc := n.GetTypeCast(); tc != nil {
		n = tc.Arg
	}
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return false, false
	}
	switch v := c.Val.(type) {
	case *pg.A_Const_Boolval:
		return v.Boolval.GetBoolval(), true
	case *pg.A_Const_Sval:
		switch strings.ToLower(v.Sval.GetSval()) {
		case "true", "t", "on", "yes", "1":
			return true, true
		case "false", "f", "off", "no", "0":
			return false, true
		}
	}
	return false, false
}
