package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
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
	fmt.Fprintf(stdout, "configuration generation %d, sweeper running: %v", st.Generation, st.Sweeper.Running)
	if st.PoolMode == proxy.PoolModeTransaction {
		fmt.Fprintf(stdout, ", pool mode %s", st.PoolMode)
		if st.PeerID != 0 {
			fmt.Fprintf(stdout, ", peer id %d", st.PeerID)
		}
	}
	fmt.Fprint(stdout, "\n\n")
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
	if st.PoolMode == proxy.PoolModeTransaction {
		fmt.Fprintln(stdout)
		printPools(stdout, st.Pools)
	}
	if len(st.Peers) > 0 {
		fmt.Fprintln(stdout)
		printPeers(stdout, st.Peers)
	}
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
		printColumnStatus(stdout, st.Sweeper.Tables)
	}
	return exitOK
}

// printPools prints the POOLS table of transaction mode: per database and
// user, the clients (logged in, holding a server, waiting, pinned), the
// server connections (held, idle, being opened), the longest current wait
// and each pool's size (+ its reserve).
func printPools(w io.Writer, pools []proxy.PoolStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL DATABASE\tUSER\tMODE\tPOOLS\tCLIENTS\tCL ACTIVE\tCL WAITING\tCL PINNED\tSV ACTIVE\tSV IDLE\tSV LOGIN\tLONGEST WAIT\tPOOL SIZE")
	for _, p := range pools {
		size := strconv.Itoa(p.PoolSize)
		if p.ReservePoolSize > 0 {
			size += "+" + strconv.Itoa(p.ReservePoolSize)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Database, p.User, p.Mode, p.Pools, p.Clients,
			p.ClientsActive, p.ClientsWaiting, p.ClientsPinned, p.ServersActive, p.ServersIdle, p.ServersLogin,
			p.LongestWait().Round(time.Millisecond), size)
	}
	_ = tw.Flush()
}

// printPeers prints the PEERS table: each configured instance and what
// became of the last cancel request forwarded to it.
func printPeers(w io.Writer, peers []proxy.PeerStatus) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tADDRESS\tLAST FORWARD\tRESULT\tFORWARDED\tFAILED\tERROR")
	for _, p := range peers {
		last, result := "-", p.LastResult
		switch {
		case p.Self:
			last, result = "(this instance)", "-"
		case !p.LastForward.IsZero():
			last = p.LastForward.Format(time.RFC3339)
		default:
			result = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", p.ID, p.Addr, last, result, p.Forwarded, p.Failed, p.LastError)
	}
	_ = tw.Flush()
}

// printColumnStatus prints the sweeper's expiring columns, when it has
// swept any: the values it set to NULL and those left.
func printColumnStatus(stdout io.Writer, tables []sweeper.TableStatus) {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	header := false
	for _, t := range tables {
		for _, c := range t.Columns {
			if !header {
				fmt.Fprintln(stdout)
				fmt.Fprintln(tw, "SWEPT COLUMN\tLAST SWEPT\tNULLED\tBATCHES\tBACKLOG\tBATCH SIZE\tSKIPPED\tERROR")
				header = true
			}
			last := "-"
			if !c.LastSwept.IsZero() {
				last = c.LastSwept.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s.%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", t.Table, c.Column, last, c.Nulled, c.Batches, c.Backlog,
				c.BatchSize, c.SlicesSkipped, c.Error)
		}
	}
	_ = tw.Flush()
}
