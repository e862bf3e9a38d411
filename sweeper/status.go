package sweeper

import (
	"slices"
	"sync"
	"time"
)

// TableStatus is what the sweeper last did to one table (Status).
type TableStatus struct {
	Table string `json:"table"`
	// Slices held by this instance now; SlicesSkipped in the last sweep of
	// the table (held by another instance).
	SlicesHeld    int `json:"slices_held"`
	SlicesSkipped int `json:"slices_skipped"`
	// LastSwept is when the table's last sweep ended (zero: not yet);
	// Deleted and Batches are what it did, Error why it failed.
	LastSwept time.Time `json:"last_swept,omitzero"`
	Deleted   int64     `json:"deleted"`
	Batches   int       `json:"batches"`
	Error     string    `json:"error,omitempty"`
	// Backlog is the expired rows left (ttlproxy_sweeper_backlog_rows);
	// BatchSize the next batch's size.
	Backlog   int64 `json:"backlog"`
	BatchSize int   `json:"batch_size"`
	// Columns are the table's expiring columns the sweeper has swept, in
	// configuration order (none: the key is left out).
	Columns []ColumnStatus `json:"columns,omitempty"`
}

// ColumnStatus is what the sweeper last did to one expiring column of a
// table: its expired values set to NULL (columns.go).
type ColumnStatus struct {
	Column string `json:"column"`
	// LastSwept is when the column's last sweep ended; Nulled and Batches
	// are what it did, SlicesSkipped the slices it left to another
	// instance, Error why it failed.
	LastSwept     time.Time `json:"last_swept,omitzero"`
	Nulled        int64     `json:"nulled"`
	Batches       int       `json:"batches"`
	SlicesSkipped int       `json:"slices_skipped"`
	Error         string    `json:"error,omitempty"`
	// Backlog is the rows whose value is expired and not yet NULL, left
	// (ttlproxy_sweeper_column_backlog_rows); BatchSize the next batch's
	// size.
	Backlog   int64 `json:"backlog"`
	BatchSize int   `json:"batch_size"`
}

// tableStates keeps the TableStatus of each target; safe for concurrent
// use.
type tableStates struct {
	mu sync.Mutex
	m  map[string]*TableStatus
}

func (ts *tableStates) update(name string, f func(*TableStatus)) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m == nil {
		ts.m = map[string]*TableStatus{}
	}
	st := ts.m[name]
	if st == nil {
		st = &TableStatus{Table: name}
		ts.m[name] = st
	}
	f(st)
}

// updateColumn applies f to the ColumnStatus of t's column, the entry
// made on first use.
func (ts *tableStates) updateColumn(t target, f func(*ColumnStatus)) {
	ts.update(t.column.table, func(st *TableStatus) {
		for i := range st.Columns {
			if st.Columns[i].Column == t.column.name {
				f(&st.Columns[i])
				return
			}
		}
		st.Columns = append(st.Columns, ColumnStatus{Column: t.column.name})
		f(&st.Columns[len(st.Columns)-1])
	})
}

// Status returns, per table, what the sweeper last did and holds now,
// sorted by table.
func (s *Sweeper) Status() []TableStatus {
	s.tables.mu.Lock()
	defer s.tables.mu.Unlock()
	out := make([]TableStatus, 0, len(s.tables.m))
	for _, st := range s.tables.m {
		c := *st
		c.Columns = slices.Clone(st.Columns)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b TableStatus) int {
		switch {
		case a.Table < b.Table:
			return -1
		case a.Table > b.Table:
			return 1
		}
		return 0
	})
	return out
}
