package proxy

import (
	"os"
	"syscall"
	"time"
)

// waiter parks a goroutine until a socket is readable without trying a read first.
//
// Go's poller always reads before it waits, so every wait for data costs one read that
// returns EAGAIN; on the fast path that is two wasted system calls per request (the
// client's next request, the target's answer), which is what nginx, reading only when
// epoll says so, does not pay. A RawConn.Read whose callback declines its first call
// waits without that read. The price: the poller forgets readiness it saw before the
// wait began, so data that arrived in the instant between our last write and the wait
// would not wake us. The wait therefore carries a short deadline (waitSlice); when it
// passes, the caller falls back to an ordinary read, which finds such data. The rare
// race costs waitSlice of latency, never a hang.
type waiter struct {
	rc    syscall.RawConn
	calls int
	fn    func(uintptr) bool // w.ready, allocated once
}

const waitSlice = 5 * time.Millisecond

var waitFirst = os.Getenv("INGRESS_NOWAIT") == ""

func (w *waiter) init(rc syscall.RawConn) {
	w.rc = rc
	w.fn = w.ready
}

func (w *waiter) ready(uintptr) bool {
	w.calls++
	return w.calls > 1
}

func (w *waiter) enabled() bool { return w.rc != nil && waitFirst }

// wait returns true when the socket became readable, false when the deadline passed or
// the wait failed (the caller then reads as usual).
func (w *waiter) wait(setDeadline func(time.Time) error, until time.Time) bool {
	if w.rc == nil || !waitFirst {
		return false
	}
	_ = setDeadline(until)
	w.calls = 0
	return w.rc.Read(w.fn) == nil
}
