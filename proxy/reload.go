package proxy

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// Live reload. What a reload may change (the rewriter, hence the rules,
// bypass roles and trusted functions, and the client limits) is one
// immutable ruleSet; the Server holds the newest, each session the one it
// works under. A session takes the newest at its next statement boundary
// (a Query, or the Parse that starts a batch): a statement already
// rewritten finishes under the old rules. Taking a new set makes the session
// read its catalog and state again (the catalog statements depend on the
// rules) and bumps its generation, so that its prepared statements are
// prepared again under the new rules (prepared.go).

// ruleSet is what a reload replaces.
type ruleSet struct {
	// gen numbers the sets of a Server, from 1.
	gen      uint64
	rw       *rewrite.Rewriter
	rewriter statementRewriter // rw, or a stand-in in tests
	rules    []ttl.Rule
	bypass   map[string]bool
	queries  catalogQueries
	// nonASCII: a rule names a table, schema or column with a non-ASCII
	// character (lexregime.go).
	nonASCII bool
	// catalogs caches catalog snapshots per database, for this set's rules.
	catalogs *catalogCache
	// rsReport is what noteRowSecurity last logged.
	rsReport rowSecurityReport

	maxMessageBytes      int
	maxClientConnections int
	clientLoginTimeout   time.Duration
	idleSessionTimeout   time.Duration
	idleTxTimeout        time.Duration
}

// newRuleSet builds the set for cfg (defaults applied).
func newRuleSet(cfg *Config, gen uint64) *ruleSet {
	rs := &ruleSet{
		gen:                  gen,
		rw:                   cfg.Rewriter,
		rewriter:             cfg.rewriter,
		rules:                cfg.Rewriter.Rules(),
		bypass:               make(map[string]bool, len(cfg.BypassRoles)),
		catalogs:             &catalogCache{m: make(map[string]catalogEntry)},
		maxMessageBytes:      cfg.MaxMessageBytes,
		maxClientConnections: cfg.MaxClientConnections,
		clientLoginTimeout:   cfg.ClientLoginTimeout,
		idleSessionTimeout:   cfg.IdleSessionTimeout,
		idleTxTimeout:        cfg.IdleTransactionTimeout,
	}
	for _, r := range cfg.BypassRoles {
		rs.bypass[r] = true
	}
	rs.queries = buildCatalogQueries(rs.rules)
	rs.nonASCII = rulesNameNonASCII(rs.rules)
	return rs
}

// Reload is what a configuration reload may change; zero values take the
// defaults, as in Config.
type Reload struct {
	// Rewriter is the new rewriter (rules, trusted functions, statement
	// limits); required.
	Rewriter               *rewrite.Rewriter
	BypassRoles            []string
	MaxMessageBytes        int
	MaxClientConnections   int
	ClientLoginTimeout     time.Duration
	IdleSessionTimeout     time.Duration
	IdleTransactionTimeout time.Duration
}

// Reload replaces the rules and limits for every session's next statement,
// without dropping a connection, and reads the auth_file again for the next
// client logins. It returns the error Config would give for
// the same values, and then changes nothing.
func (s *Server) Reload(r Reload) error {
	if r.Rewriter == nil {
		return errors.New("proxy: Reload.Rewriter is nil")
	}
	cfg := s.cfg
	cfg.Rewriter, cfg.rewriter = r.Rewriter, nil
	cfg.BypassRoles = r.BypassRoles
	cfg.MaxMessageBytes, cfg.MaxClientConnections = r.MaxMessageBytes, r.MaxClientConnections
	cfg.ClientLoginTimeout, cfg.IdleSessionTimeout = r.ClientLoginTimeout, r.IdleSessionTimeout
	cfg.IdleTransactionTimeout = r.IdleTransactionTimeout
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.auth != nil {
		// First: a file that does not load fails the whole reload.
		if err := s.auth.Reload(); err != nil {
			return err
		}
	}
	old := s.set.Load()
	next := newRuleSet(&cfg, old.gen+1)
	s.metrics.Retire(shapeStats(old.rw))
	s.set.Store(next)
	s.log.Info("configuration reloaded", "generation", next.gen, "tables", len(next.rules),
		"rules_changed", !slices.EqualFunc(old.rules, next.rules, sameRule))
	return nil
}

// sameRule compares two rules field by field.
func sameRule(a, b ttl.Rule) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

// adopt moves the session onto rs, the Server's newest set: called by
// clientToServer at a statement boundary.
func (s *clientConn) adopt(rs *ruleSet) {
	s.rs.Store(rs)
	s.st.rw, s.st.bypass = rs.rw, rs.bypass
	// Statements prepared under the old rules are prepared again at the
	// next refresh, even when the new set has no rules.
	s.st.track = !s.replication && (len(rs.rules) > 0 || len(s.st.prepared) > 0)
	s.st.gen++
	if s.st.track {
		s.st.catalogStale, s.st.dirty = true, true
	}
	s.log.Debug("session takes the reloaded configuration", "generation", rs.gen)
}
