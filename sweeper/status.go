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

// Status returns, per table, what the sweeper last did and holds now,
// sorted by table.
func (s *Sweeper) Status() []TableStatus {
	s.tables.mu.Lock()
	defer s.tables.mu.Unlock()
	out := make([]TableStatus, 0, len(s.tables.m))
	for _, st := range s.tables.m {
		out = append(out, *st)
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
