//go:build !race

package proxy

// raceEnabled: the race detector is on (race_test.go).
const raceEnabled = false
