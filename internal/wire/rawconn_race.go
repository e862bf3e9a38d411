//go:build race

package wire

import (
	"runtime"
	"unsafe"
)

// ioSync stands for the order that data through a socket gives between the
// goroutine that writes and the one that reads, as syscall.Read and
// syscall.Write tell the race detector (syscall's ioSync): raw system calls
// do not, so Conn does it here.
var ioSync int64

func raceReadDone(b []byte) {
	if len(b) > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&b[0]), len(b))
	}
	runtime.RaceAcquire(unsafe.Pointer(&ioSync))
}

func raceWriteStart(b []byte) {
	runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync))
	runtime.RaceReadRange(unsafe.Pointer(&b[0]), len(b))
}
