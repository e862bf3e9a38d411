//go:build race

package proxy

// raceEnabled: the race detector is on. It changes what memory and
// allocation figures mean: sync.Pool drops a quarter of what is Put, and
// shadow memory multiplies the process's size.
const raceEnabled = true
