//go:build race

package sockio

import "syscall"

// Under the race detector the calls are the syscall package's, as a
// TCPConn's are: those tell the detector which bytes the kernel read and
// wrote, and order a write to a socket before the read of its bytes.
// RawSyscall does neither, so the detector would miss races on buffers
// and report ones the socket's ordering rules out.

func sysRead(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), p)
	return n, errnoOf(err)
}

func sysWrite(fd uintptr, p []byte) (int, syscall.Errno) {
	n, err := syscall.Write(int(fd), p)
	return n, errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EIO
}
