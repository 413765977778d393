//go:build !linux

package proxy

import "github.com/serve-zone/ingress/proxy/internal/park"

// canSleep: nothing parks here (park.CanPark), so nothing sleeps (h1sleep_linux.go).
const canSleep = false

func (*tcpConn) sleep(*park.Parker) bool { return false }

// readableFn is never asked for: no connection parks here (awaitIdle).
func (*tcpConn) readableFn() func(uintptr) bool { return func(uintptr) bool { return true } }
