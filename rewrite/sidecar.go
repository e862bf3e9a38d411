package rewrite

import (
	"fmt"
	"time"
)

// sidecarTTL reports that INSERT into the rule's table must register an
// expiry in the sidecar registry: a sidecar rule with a lifetime to stamp.
func (w *walker) sidecarTTL(rule *Rule) bool {
	_, ok := sidecarTTLFor(rule, w.s)
	return ok
}

// sidecarTTLFor returns the lifetime registered for rows inserted into a
// sidecar rule's table in session s, and whether registration applies.
func sidecarTTLFor(r *Rule, s *Session) (time.Duration, bool) {
	if r.RuleKind() != KindSidecar {
		return 0, false
	}
	ttl := r.DefaultTTL
	if s.TTL != nil {
		ttl = *s.TTL
	}
	return ttl, ttl > 0
}

// rejectSidecarRegistration fails closed on an INSERT form whose rows the
// rewriter cannot register in the sidecar registry.
func (w *walker) rejectSidecarRegistration(rule *Rule, form string) {
	w.fail(&Error{
		Code:    "0A000",
		Message: fmt.Sprintf("ttlproxy: cannot insert into TTL table %s with %s: the sidecar expiry cannot be registered for this form", rule.QualifiedName(), form),
		Hint:    fmt.Sprintf("Use a plain INSERT INTO %s … without RETURNING, outside WITH, or insert the registry row yourself.", rule.Table),
	})
}
