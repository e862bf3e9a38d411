package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/sweeper"
)

// adminStatus is the admin server's /status document.
type adminStatus struct {
	proxy.Status
	// Sweeper reports whether a sweeper runs.
	Sweeper struct {
		Running bool                  `json:"running"`
		Tables  []sweeper.TableStatus `json:"tables"`
	} `json:"sweeper"`
}

// status returns the /status document.
func (s *stack) status() adminStatus {
	st := adminStatus{Status: s.proxy.Status()}
	s.reloadMu.Lock()
	st.Sweeper.Running = s.sweeper != nil
	if s.sweeper != nil {
		st.Sweeper.Tables = s.sweeper.Status()
	}
	s.reloadMu.Unlock()
	return st
}

// runStatus prints what a running ttlproxy reports on its admin server's
// /status: the rule set in force, the tables and the sessions.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", "[--admin URL] [--token-file FILE]", stderr)
	admin := fs.String("admin", "http://127.0.0.1:9187", "the admin server's base `URL`")
	asJSON := fs.Bool("json", false, "print the JSON document as served")
	tokenFile := fs.String("token-file", "", "`file` holding the bearer token of admin.bearer_token_file")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected argument %q", fs.Arg(0))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(*admin, "/")+"/status", nil)
	if err != nil {
		return usageError(fs, "--admin: %v", err)
	}
	if *tokenFile != "" {
		tok, err := readToken(*tokenFile)
		if err != nil {
			return usageError(fs, "--token-file: %v", err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy status: %v\n", err)
		return exitFailure
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "ttlproxy status: %s: %s %v\n", req.URL, resp.Status, err)
		return exitFailure
	}
	if *asJSON {
		_, _ = stdout.Write(body)
		return exitOK
	}
	var st adminStatus
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintf(stderr, "ttlproxy status: %s: %v\n", req.URL, err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "configuration generation %d, sweeper running: %v\n\n", st.Generation, st.Sweeper.Running)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tKIND\tEXPIRY\tDEFAULT TTL")
	for _, t := range st.Tables {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Table, t.Kind, t.Expiry, t.DefaultTTL)
	}
	_ = tw.Flush()
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tCLIENT\tUSER\tDATABASE\tSTATE\tSINCE\tSTATEMENTS\tREJECTED\tGENERATION")
	for _, ss := range st.Sessions {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\n", ss.ID, ss.ClientAddr, ss.User, ss.Database, ss.State,
			ss.Since.Format(time.RFC3339), ss.Statements, ss.Rejected, ss.Generation)
	}
	_ = tw.Flush()
	if len(st.DDLEvents) > 0 {
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DDL EVENTS\tFLOWING\tSINCE\tEVENTS\tCATALOG READS\tFAILED\tREASON")
		for _, e := range st.DDLEvents {
			fmt.Fprintf(tw, "%s\t%v\t%s\t%d\t%d\t%d\t%s\n", e.Database, e.Flowing, e.Since.Format(time.RFC3339),
				e.Events, e.CatalogReads, e.CatalogReadFailures, e.Reason)
		}
		_ = tw.Flush()
	}
	if len(st.Sweeper.Tables) > 0 {
		fmt.Fprintln(stdout)
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SWEPT TABLE	LAST SWEPT	DELETED	BATCHES	BACKLOG	BATCH SIZE	SLICES HELD	SKIPPED	ERROR")
		for _, t := range st.Sweeper.Tables {
			last := "-"
			if !t.LastSwept.IsZero() {
				last = t.LastSwept.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", t.Table, last, t.Deleted, t.Batches, t.Backlog,
				t.BatchSize, t.SlicesHeld, t.SlicesSkipped, t.Error)
		}
		_ = tw.Flush()
	}
	return exitOK
}
