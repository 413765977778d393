package proxy

import "time"

// rhythm is a connection's pace: when its last request began and the two gaps between
// the starts of its last three requests. A client that keeps a pace (a browser, a phone,
// a poller: a request every fraction of a second to a few seconds) sends its next
// request within about its longest recent gap; its connection waits for it on its
// goroutine, in the runtime's poller, for twice that before it parks, so that a request
// in the pace finds its connection awake: a park and a wake cost more system calls than
// the request itself (issue 32). A connection without a pace (a single request so far)
// parks as before. 16 bytes: sleepers keep it too (h1sleep_linux.go).
type rhythm struct {
	last      time.Duration // when the last request began, since rhythmEpoch; 0: none yet
	gap, prev uint32        // the last two gaps, in microseconds (0: not known)
}

// rhythmEpoch is what rhythm.last counts from (a monotonic reading).
var rhythmEpoch = time.Now()

// h1AwakeMax bounds the wait a pace asks for: beyond it a connection parks whatever its
// pace (its goroutine's stack is worth more than the wake it saves).
const h1AwakeMax = 10 * time.Second

// note records a request that began at now.
func (r *rhythm) note(now time.Time) {
	t := now.Sub(rhythmEpoch)
	if r.last > 0 {
		g := min((t-r.last)/time.Microsecond, 1<<32-1)
		r.prev, r.gap = r.gap, uint32(max(g, 1))
	}
	r.last = t
}

// awake is how long an idle connection with this pace waits for its next request
// before it parks: base (the delay without a pace), or twice the longer of its last two
// gaps plus h1ParkSoon when that is longer, up to h1AwakeMax. Twice: the idle deadline
// is renewed only once half its wait is gone (idleDeadlineStale), so a request may find
// the wait half spent.
func (r *rhythm) awake(base time.Duration) time.Duration {
	g := time.Duration(max(r.gap, r.prev)) * time.Microsecond
	if g == 0 {
		return base
	}
	return max(base, min(2*g+h1ParkSoon, h1AwakeMax))
}
