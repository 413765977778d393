package rawnet

import (
	"syscall"
	"unsafe"
)

// Read is read(2) on the non-blocking descriptor fd; the error is a syscall.Errno or nil.
func Read(fd int, b []byte) (int, error) {
	if raceBuild {
		return stdRead(fd, b)
	}
	return rawRead(fd, b)
}

// Write is write(2) on the non-blocking descriptor fd; it may write part of b.
func Write(fd int, b []byte) (int, error) {
	if raceBuild {
		return stdWrite(fd, b)
	}
	return rawWrite(fd, b)
}

// Peek is recv(2) with MSG_PEEK|MSG_DONTWAIT into b: the bytes stay queued. It returns
// 0, nil at the end of the stream and syscall.EAGAIN when nothing is queued.
func Peek(fd int, b []byte) (int, error) {
	if raceBuild {
		return stdPeek(fd, b)
	}
	return rawPeek(fd, b)
}

// The raw calls: syscall.RawSyscall, the scheduler is not told.

func rawRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func rawWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func rawPeek(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// The race detector's build uses the syscall package's calls, which annotate the bytes a
// read fills and the happens-before edge that socket traffic carries between goroutines
// (without them, two goroutines that hand data over through a socket look unordered).

func stdRead(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := syscall.Read(fd, b)
	return max(n, 0), err
}

func stdWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, err := syscall.Write(fd, b)
	return max(n, 0), err
}

func stdPeek(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, err := syscall.Recvfrom(fd, b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return max(n, 0), err
}
