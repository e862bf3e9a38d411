// Package rawsys is the system calls the benchmark floors
// (bench/relayfloor, bench/poolfloor) make on their sockets' hot path:
// read(2) and write(2) on a non-blocking descriptor through
// unix.RawSyscall, without the runtime's entersyscall/exitsyscall (which
// wakes Go's sysmon thread when the process was idle; ttlproxy's
// internal/wire/rawconn.go does the same).
package rawsys

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReadWrite makes the system call trap (unix.SYS_READ or unix.SYS_WRITE)
// on fd with buffer b (not empty), again after EINTR. ok is false when the
// descriptor is not ready (EAGAIN); otherwise n bytes moved, or err is the
// errno.
func ReadWrite(trap, fd uintptr, b []byte) (n int, ok bool, err error) {
	for {
		//nolint:gosec // G103: read(2)/write(2) take the buffer's address; b outlives the call.
		r, _, errno := unix.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch errno {
		case 0:
			return int(r), true, nil
		case unix.EINTR:
		case unix.EAGAIN:
			return 0, false, nil
		default:
			return 0, true, errno
		}
	}
}

// WriteAll writes all of b to the non-blocking socket fd, waiting with
// poll(2) while its buffer is full (rare for a benchmark's small messages;
// the wait blocks the calling thread).
func WriteAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, ok, err := ReadWrite(unix.SYS_WRITE, uintptr(fd), b)
		if err != nil {
			return err
		}
		if !ok {
			if _, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, -1); err != nil && !errors.Is(err, unix.EINTR) { //nolint:gosec // a descriptor
				return err
			}
			continue
		}
		b = b[n:]
	}
	return nil
}
