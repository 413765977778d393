//go:build !linux

package proxyhdr

import "syscall"

// canPeek: elsewhere than on Linux, Read reads as ReadFrom does.
const canPeek = false

func readPeek(syscall.RawConn) (Header, error) { panic("proxyhdr: no peek here") }
