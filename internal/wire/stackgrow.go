package wire

// GrowStack grows the calling goroutine's stack to at least 32 KiB at
// once, while it is still shallow. A session's goroutines go deep (the
// startup, SCRAM, the rewriter, the relay) and would otherwise grow from
// the runtime's starting size by doubling, each time copying and
// adjusting every frame already on the stack (runtime.copystack); one
// growth at the top copies almost nothing.
//
// The index, unknown to the compiler, keeps the frame from being
// optimised away; nothing is shared between goroutines.
//
//go:noinline
func GrowStack(i int) byte {
	var frame [16 << 10]byte
	return frame[i&(len(frame)-1)]
}
