//go:build !linux

package proxy

import "errors"

// canPark is Linux-only; elsewhere idle connections keep their goroutine and buffer.
const canPark = false

// parker is never made here (newParker fails), so no connection is ever parked and its
// methods are not reached.
type parker struct{}

func newParker(*Server) (*parker, error) { return nil, errors.New("proxy: cannot park here") }

func (*parker) run()              {}
func (*parker) stop()             {}
func (*parker) park(parkee) bool  { return false }
func (*parker) claim(parkee) bool { return false }
func (*parker) parkedNow() int    { return 0 }
func (*parker) endSleepers()      {}
func (*parker) noteHandshake()    {}

// canSleep: nothing parks, so nothing sleeps (h1sleep_linux.go).
const canSleep = false

func (*h1Conn) sleep(*parker) bool { return false }

// h1Sleeper is never made here.
type h1Sleeper struct{}

func (*h1Sleeper) End() {}

// readableFn is never asked for: no connection parks here (awaitIdle).
func (*h1Conn) readableFn() func(uintptr) bool { return func(uintptr) bool { return true } }
