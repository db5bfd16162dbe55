package cli

import (
	"os"
	"syscall"
	"unsafe"
)

// pollFd is struct pollfd of poll(2).
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const (
	pollOut = 0x4 // POLLOUT
	pollErr = 0x8 // POLLERR: for a pipe's write end, no reader is left
)

// outputReaderGone reports whether any of streams is a pipe whose reading
// end has been closed by every reader, so that writing to it fails (or
// raises SIGPIPE) for good.
func outputReaderGone(streams ...any) bool {
	for _, s := range streams {
		f, ok := s.(*os.File)
		if !ok || f == nil {
			continue
		}
		rc, err := f.SyscallConn()
		if err != nil {
			continue
		}
		gone := false
		_ = rc.Control(func(fd uintptr) {
			p := pollFd{fd: int32(fd), events: pollOut}
			var zero syscall.Timespec // do not wait
			n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p)), 1,
				uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
			gone = errno == 0 && n == 1 && p.revents&pollErr != 0
		})
		if gone {
			return true
		}
	}
	return false
}
