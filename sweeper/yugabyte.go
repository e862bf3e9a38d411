package sweeper

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
)

// What a YugabyteDB server supports, by release. The sweeper detects
// YugabyteDB by "-YB-" in version(), which prints the PostgreSQL version the
// YSQL layer is built on and then the YugabyteDB release, e.g.
// "PostgreSQL 11.2-YB-2.20.0.0-b0 on x86_64-…" or "15.2-YB-2.23.0.1500-b0".
// Releases are numbered 2.MINOR.PATCH.N (preview and the older stable
// series) or YEAR.N.PATCH.N (the stable series from 2024 on).

// ybRelease is a YugabyteDB release number, e.g. {2, 25, 1, 0} or
// {2025, 1, 0, 0}.
type ybRelease [4]int

// ybVersion matches the release in version(): "-YB-" then the dotted
// release number.
var ybVersion = regexp.MustCompile(`-YB-([0-9]+)\.([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?`)

// parseYBRelease returns the YugabyteDB release in a version() string, and
// false when it holds none.
func parseYBRelease(version string) (ybRelease, bool) {
	m := ybVersion.FindStringSubmatch(version)
	if m == nil {
		return ybRelease{}, false
	}
	var r ybRelease
	for i := range r {
		if m[i+1] == "" {
			continue
		}
		n, err := strconv.Atoi(m[i+1])
		if err != nil {
			return ybRelease{}, false
		}
		r[i] = n
	}
	return r, true
}

// atLeast reports whether r is the release preview (2.x) or stable (year.x)
// or later: a preview release counts as later only when the stable series
// is 0 (any year), a stable one only when its own series is.
func (r ybRelease) atLeast(preview, stable ybRelease) bool {
	if r[0] >= 2000 {
		return stable[0] != 0 && slices.Compare(r[:], stable[:]) >= 0
	}
	return preview[0] != 0 && slices.Compare(r[:], preview[:]) >= 0
}

func (r ybRelease) String() string {
	return fmt.Sprintf("%d.%d.%d.%d", r[0], r[1], r[2], r[3])
}

// Releases that added what the sweeper uses. Sources, read but not run:
//   - Advisory locks: "Advisory locks are available in 2.25.1.0 and later"
//     (YugabyteDB documentation, explore/transactions/explicit-locking), GA
//     in the 2025.1 stable series (YugabyteDB docs pull request #27744,
//     "Advisory locks is GA"). Before them, pg_try_advisory_lock fails
//     with 0A000 "advisory locks are not yet implemented"
//     (src/postgres/src/backend/utils/adt/lockfuncs.c), and releases older
//     than the change that added that error returned success without
//     taking a lock (YugabyteDB issue #19974). With the server setting
//     yb_silence_advisory_locks_not_supported_error on, the error is
//     skipped and the lock is taken on the local node only.
//   - Replication origins (pg_replication_origin_session_setup): early
//     access in the 2025.2.1 stable series (documentation,
//     additional-features/change-data-capture/using-logical-replication/
//     advanced-topic, "Replication origins"; docs pull request #30131).
var (
	ybAdvisoryLocksPreview = ybRelease{2, 25, 1, 0}
	ybAdvisoryLocksStable  = ybRelease{2025, 1, 0, 0}
	ybOriginsStable        = ybRelease{2025, 2, 1, 0}
)

// ybCoordination reports why advisory locks cannot coordinate instances on
// a YugabyteDB server whose version() is version and whose
// yb_silence_advisory_locks_not_supported_error setting is silenced (""
// when it does not exist), or "" when they can.
func ybCoordination(version, silenced string) string {
	r, ok := parseYBRelease(version)
	switch {
	case !ok:
		return "the YugabyteDB release is not in version()"
	case !r.atLeast(ybAdvisoryLocksPreview, ybAdvisoryLocksStable):
		return fmt.Sprintf("YugabyteDB %s has no advisory locks (they came in 2.25.1 and 2025.1)", r)
	case silenced == "on" || silenced == "true":
		return "yb_silence_advisory_locks_not_supported_error is on: an advisory lock may be taken on one node only"
	}
	return ""
}

// ybOriginWarning returns a warning when CDC origins are configured for a
// YugabyteDB release without replication origins, or "".
func ybOriginWarning(version string) string {
	r, ok := parseYBRelease(version)
	if ok && r.atLeast(ybRelease{}, ybOriginsStable) {
		return ""
	}
	return "cdc_origin: replication origins need YugabyteDB 2025.2.1 or later (early access); the sweeper's batches will fail to set it up"
}
