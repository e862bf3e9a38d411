package proxy

import (
	"slices"
	"strings"
	"time"
)

// Status is what the proxy is doing, for the admin server's /status.
type Status struct {
	// Generation numbers the rule set in force: 1 at start, one more per
	// reload.
	Generation uint64 `json:"generation"`
	// Tables are the TTL tables and their rules in force.
	Tables []TableStatus `json:"tables"`
	// Sessions are the client connections open, oldest first.
	Sessions []SessionStatus `json:"sessions"`
	// DDLEvents are the databases' DDL events (ddlevents.go), by name; empty
	// without Config.DDLEventsDSN or before a session used a database.
	DDLEvents []DDLEventsStatus `json:"ddl_events"`
	// PoolMode is pool_mode: session or transaction.
	PoolMode string `json:"pool_mode"`
	// PeerID is the instance's peer_id in transaction mode (0: not peered).
	PeerID int `json:"peer_id"`
	// Pools are transaction mode's pools by database and user
	// (poolstatus.go); empty in session mode.
	Pools []PoolStatus `json:"pools"`
	// Peers are the instances of peers in transaction mode and what became
	// of the cancel requests forwarded to them (peerstatus.go); empty in
	// session mode.
	Peers []PeerStatus `json:"peers"`
	// CatalogRefresh is how sessions learn of DDL made outside the proxy:
	// "ddl_events", or "catalog_ttl" (only as their catalog ages, without
	// DDL events).
	CatalogRefresh string `json:"catalog_refresh"`
	// RowSecurity is the row_security level and the tables it refuses.
	RowSecurity RowSecurityStatus `json:"row_security"`
}

// TableStatus is one TTL table's rule.
type TableStatus struct {
	Table      string `json:"table"` // schema.table
	Kind       string `json:"kind"`
	Expiry     string `json:"expiry"`                // what the rule reads: a column, base+interval, a registry
	DefaultTTL string `json:"default_ttl,omitempty"` // "" when nothing is stamped
}

// SessionStatus is one client connection.
type SessionStatus struct {
	ID         uint64    `json:"id"`
	ClientAddr string    `json:"client_addr"`
	User       string    `json:"user"`
	Database   string    `json:"database"`
	State      string    `json:"state"` // startup, idle, active, idle in transaction, idle in transaction (aborted), waiting (for a server, transaction mode)
	Since      time.Time `json:"since"`
	Statements uint64    `json:"statements"` // Query and Parse texts
	Rejected   uint64    `json:"rejected"`
	Generation uint64    `json:"generation"` // of the rule set the session works under
}

// Status returns a snapshot of the proxy's state.
func (s *Server) Status() Status {
	rs := s.set.Load()
	st := Status{Generation: rs.gen, Tables: []TableStatus{}, Sessions: []SessionStatus{}}
	for _, r := range rs.rules {
		t := TableStatus{Table: r.QualifiedName(), Kind: string(r.RuleKind())}
		switch r.RuleKind() {
		case "derived":
			t.Expiry = r.BaseColumn + " + "
			if r.IntervalColumn != "" {
				t.Expiry += r.IntervalColumn
			} else {
				t.Expiry += r.ExpireAfter.String()
			}
		case "sidecar":
			t.Expiry = r.SidecarSchemaName() + "." + r.SidecarTable + " (" + strings.Join(r.KeyColumns, ", ") + ")"
		case "none":
			// No row rule: the expiring columns.
			names := make([]string, len(r.Columns))
			for i := range r.Columns {
				names[i] = r.Columns[i].Column
			}
			t.Expiry = "columns " + strings.Join(names, ", ")
		default:
			t.Expiry = r.ExpiryColumn()
			if r.ColumnType != "" {
				t.Expiry += " (" + string(r.ColumnType) + ")"
			}
		}
		if r.DefaultTTL > 0 {
			t.DefaultTTL = r.DefaultTTL.String()
		}
		st.Tables = append(st.Tables, t)
	}
	s.mu.Lock()
	sessions := make([]*clientConn, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	st.PoolMode = s.cfg.PoolMode
	if st.PoolMode == "" {
		st.PoolMode = PoolModeSession
	}
	var waiting map[uint64]bool
	st.Pools, waiting = s.poolStatus(sessions)
	if s.cancelKeys != nil {
		st.PeerID = s.cfg.PeerID
	}
	st.Peers = s.peerStatus()
	for _, sess := range sessions {
		ss := sess.status()
		if waiting[ss.ID] && ss.State == "idle" {
			ss.State = "waiting"
		}
		st.Sessions = append(st.Sessions, ss)
	}
	slices.SortFunc(st.Sessions, func(a, b SessionStatus) int { return a.Since.Compare(b.Since) })
	st.CatalogRefresh = s.catalogRefresh()
	st.RowSecurity = rs.rowSecurityStatus()
	st.DDLEvents = s.events.status()
	slices.SortFunc(st.DDLEvents, func(a, b DDLEventsStatus) int { return strings.Compare(a.Database, b.Database) })
	return st
}

// status describes the session; safe from any goroutine.
func (s *clientConn) status() SessionStatus {
	st := SessionStatus{
		ID:         s.id,
		ClientAddr: s.conn().RemoteAddr().String(),
		Since:      s.started,
		Statements: s.statements.Load(),
		Rejected:   s.nrejected.Load(),
		Generation: s.rs.Load().gen,
		State:      "startup",
	}
	select {
	case <-s.ready:
		// user and database are written before ready is closed.
		st.User, st.Database = s.user, s.database
		switch {
		case s.link.pending.Load() > 0:
			st.State = "active"
		case byte(s.link.txStatus.Load()) == 'T':
			st.State = "idle in transaction"
		case byte(s.link.txStatus.Load()) == 'E':
			st.State = "idle in transaction (aborted)"
		default:
			st.State = "idle"
		}
	default:
	}
	return st
}
