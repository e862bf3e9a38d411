// Package leakcheck fails a test when goroutines it names outlive it.
//
// A goroutine counts as leaked when its stack holds one of the given markers
// (substrings of function names, e.g. "ttlproxy/proxy.(*"). Goroutines are
// given a few seconds to finish, since closing a connection or a pool ends
// its goroutines asynchronously.
package leakcheck

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// Check fails t if, after up to 5 seconds, a goroutine whose stack contains
// any of markers is still running.
func Check(t testing.TB, markers ...string) {
	t.Helper()
	if leaked := Wait(markers...); len(leaked) > 0 {
		t.Errorf("%d goroutine(s) leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
	}
}

// Wait returns the stacks of the goroutines holding any of markers that
// are still running after up to 5 seconds; nil when none is.
func Wait(markers ...string) []string {
	var leaked []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		leaked = Leaked(markers...)
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Leaked returns the stacks of the running goroutines, other than the
// caller's, that contain any of markers.
func Leaked(markers ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue // runtime.Stack lists the calling goroutine first
		}
		for _, m := range markers {
			if strings.Contains(g, m) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
