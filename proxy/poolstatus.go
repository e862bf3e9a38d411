package proxy

import (
	"cmp"
	"slices"
	"time"
)

// The POOLS table of /status (docs/design/pooling.md §6), PgBouncer's SHOW
// POOLS: per database and user, the clients and server connections of
// transaction mode at one moment.

// PoolStatus is the pools of one database and user in transaction mode.
// Pools of one database and user that differ in startup parameters, or in
// the role's settings (auth_query's hash), add up; Pools counts them.
type PoolStatus struct {
	Database string `json:"database"`
	User     string `json:"user"`
	Mode     string `json:"mode"` // pool_mode: transaction
	// Pools is the number of pools (keys) added up in this row.
	Pools int `json:"pools"`
	// Clients are the clients logged in; ClientsActive hold a server
	// connection now (running a transaction, or pinned); ClientsWaiting
	// wait for one; ClientsPinned keep theirs for the rest of their session.
	Clients        int `json:"clients"`
	ClientsActive  int `json:"clients_active"`
	ClientsWaiting int `json:"clients_waiting"`
	ClientsPinned  int `json:"clients_pinned"`
	// ServersActive are held by clients, ServersIdle wait for one,
	// ServersLogin are being opened.
	ServersActive int `json:"servers_active"`
	ServersIdle   int `json:"servers_idle"`
	ServersLogin  int `json:"servers_login"`
	// LongestWaitSeconds is how long the client longest in a queue has
	// waited, 0 when none waits.
	LongestWaitSeconds float64 `json:"longest_wait_seconds"`
	// PoolSize and ReservePoolSize are each pool's limits in force
	// (default_pool_size, reserve_pool_size).
	PoolSize        int `json:"pool_size"`
	ReservePoolSize int `json:"reserve_pool_size"`
}

// LongestWait is LongestWaitSeconds as a duration.
func (p PoolStatus) LongestWait() time.Duration {
	return time.Duration(p.LongestWaitSeconds * float64(time.Second))
}

// poolStatus returns the POOLS table, sorted by database and user, and the
// ids of the clients waiting for a server; an empty table in session mode.
func (s *Server) poolStatus(sessions []*clientConn) ([]PoolStatus, map[uint64]bool) {
	rows := []PoolStatus{}
	waiting := map[uint64]bool{}
	if s.pools == nil {
		return rows, waiting
	}
	type dbUser struct{ db, user string }
	byKey := map[dbUser]*PoolStatus{}
	row := func(p *pool) *PoolStatus {
		k := dbUser{p.key.database, p.key.user}
		r := byKey[k]
		if r == nil {
			r = &PoolStatus{Database: k.db, User: k.user, Mode: PoolModeTransaction}
			byKey[k] = r
		}
		return r
	}
	for _, p := range s.pools.pools() {
		st := p.stats()
		size, reserve := p.limits()
		r := row(p)
		r.Pools++
		r.ClientsWaiting += st.waiting
		r.ServersActive += st.active
		r.ServersIdle += st.idle
		r.ServersLogin += st.logins
		r.LongestWaitSeconds = max(r.LongestWaitSeconds, st.longestWait.Seconds())
		r.PoolSize, r.ReservePoolSize = size, reserve
		for _, id := range p.waitingClients() {
			waiting[id] = true
		}
	}
	for _, c := range sessions {
		pl := c.link.pooled.Load()
		if pl == nil {
			continue // logging in
		}
		r := row(pl.pool)
		r.Clients++
		if held, _ := pl.holding(); held != nil {
			r.ClientsActive++
		}
		if pl.pinned.Load() {
			r.ClientsPinned++
		}
	}
	for _, r := range byKey {
		rows = append(rows, *r)
	}
	slices.SortFunc(rows, func(a, b PoolStatus) int {
		return cmp.Or(cmp.Compare(a.Database, b.Database), cmp.Compare(a.User, b.User))
	})
	return rows, waiting
}
