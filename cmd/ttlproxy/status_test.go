package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/sweeper"
)

// TestStatusColumns: ttlproxy status prints the expiring columns the
// sweeper reports under /status, each with its values nulled and its
// backlog; without any, no column table.
func TestStatusColumns(t *testing.T) {
	var st adminStatus
	st.Sweeper.Running = true
	st.Sweeper.Tables = []sweeper.TableStatus{{
		Table: "public.orders", Deleted: 4, Backlog: 1,
		Columns: []sweeper.ColumnStatus{
			{Column: "client_ip", LastSwept: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), Nulled: 20, Batches: 3, Backlog: 7, BatchSize: 1000},
			{Column: "note", Error: "nulling public.orders.note: permission denied"},
		},
	}}
	body, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"columns":[{"column":"client_ip","last_swept":"2030-01-02T03:04:05Z","nulled":20,`) {
		t.Errorf("/status JSON: %s", body)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"status", "--admin", srv.URL}, &out, &errOut); code != 0 {
		t.Fatalf("ttlproxy status: %d\n%s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{
		"SWEPT COLUMN             LAST SWEPT            NULLED  BATCHES  BACKLOG  BATCH SIZE  SKIPPED  ERROR",
		"public.orders.client_ip  2030-01-02T03:04:05Z  20      3        7        1000        0",
		"public.orders.note       -                     0       0        0        0           0        nulling public.orders.note: permission denied",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ttlproxy status lacks %q:\n%s", want, out.String())
		}
	}

	st.Sweeper.Tables[0].Columns = nil
	if body, err = json.Marshal(st); err != nil || strings.Contains(string(body), `"columns"`) {
		t.Fatalf("/status JSON of a table without columns: %s %v", body, err)
	}
	out.Reset()
	if code := run(context.Background(), []string{"status", "--admin", srv.URL}, &out, &errOut); code != 0 || strings.Contains(out.String(), "SWEPT COLUMN") {
		t.Errorf("ttlproxy status without columns: %d\n%s", code, out.String())
	}
}
