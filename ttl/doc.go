// Package ttl is ttlproxy's domain model, in pure Go: a TTL table's expiry
// rule (Rule: column, derived or sidecar, with its column type), the one
// definition of live and expired as SQL predicates shared by the proxy's
// filter, the sweeper and the row-level security policy, the stamping
// expressions INSERT and UPDATE use, the ttlproxy.ttl setting's syntax
// (ParseTTLSetting), and identifier and literal quoting.
//
// It does no I/O and links no SQL parser, so the configuration, install and
// sweeper packages use it without the parser (ARCHITECTURE.md, "Packages").
package ttl
