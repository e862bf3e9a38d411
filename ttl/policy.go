package ttl

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// PolicyFingerprint names the live condition a row-security policy for the
// rule must hold (ttlproxy install --row-security): the first 16 hex digits
// of the SHA-256 of LiveCondition under a fixed qualifier at now(). A
// table's inheritance children and partitions share their ancestor's. The
// install records it in the policy's comment, and the proxy compares it at
// row_security required: a rule changed since the install (another
// interval, another column) gets another fingerprint, so its old policy is
// reported stale instead of trusted. "" for a rule with no row rule, whose
// table gets no policy.
func (r *Rule) PolicyFingerprint() string {
	if !r.HasRowRule() {
		return ""
	}
	sum := sha256.Sum256([]byte(r.LiveCondition(`"t"`, Now)))
	return hex.EncodeToString(sum[:8])
}

// PolicyConditionTag precedes the fingerprint in the comment of the live
// policy.
const PolicyConditionTag = "; condition "

// PolicyCondition returns the fingerprint the comment of a live policy
// records, "" when it records none (an install older than the
// fingerprint).
func PolicyCondition(comment string) string {
	_, fp, ok := strings.Cut(comment, PolicyConditionTag)
	if !ok {
		return ""
	}
	fp, _, _ = strings.Cut(fp, ";")
	return strings.TrimSpace(fp)
}
