package rewrite

import (
	"sort"
	"strings"
)

// edit replaces sql[start:end] with text; start == end inserts.
type edit struct {
	start, end int
	text       string
	seq        int
}

// applyEdits splices edits into sql. At one offset, insertions come before a
// replacement that starts there, and insertions keep the order they were made
// in. Overlapping edits are a bug in the rewriter and return ok false.
func applyEdits(sql string, edits []edit) (string, bool) {
	sort.Slice(edits, func(i, j int) bool {
		a, b := edits[i], edits[j]
		if a.start != b.start {
			return a.start < b.start
		}
		ai, bi := a.start == a.end, b.start == b.end
		if ai != bi {
			return ai
		}
		return a.seq < b.seq
	})
	n := len(sql)
	for _, e := range edits {
		n += len(e.text) - (e.end - e.start)
	}
	var b strings.Builder
	b.Grow(n)
	cur := 0
	for _, e := range edits {
		if e.start < cur || e.end < e.start || e.end > len(sql) {
			return "", false
		}
		b.WriteString(sql[cur:e.start])
		b.WriteString(e.text)
		cur = e.end
	}
	b.WriteString(sql[cur:])
	return b.String(), true
}
