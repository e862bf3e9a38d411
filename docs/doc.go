// Package docs holds ttlproxy's manual, one Markdown page per concern. It
// has no Go code of its own: its tests fail when a configuration key, a
// metric or a subcommand exists in the code and not in the manual (or the
// other way round), and when ARCHITECTURE.md's packages and import graph
// differ from what go list reports.
package docs
