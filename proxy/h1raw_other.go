//go:build !linux

package proxy

import "syscall"

// canRawLoop is Linux-only (rawnet); elsewhere every read goes through c.cc.
const canRawLoop = false

// sysRead is never called here.
func sysRead(int, []byte) (int, error) { return 0, syscall.EINVAL }
