//go:build !linux

package proxy

import (
	"errors"
	"syscall"
)

// canPark is Linux-only; elsewhere idle connections keep their buffer.
const canPark = false

func waitReadable(syscall.RawConn) error { return errors.New("proxy: cannot park here") }
