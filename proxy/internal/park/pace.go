package park

import "time"

// Pace is a connection's pace: when its last request (or burst of streams) began and the
// two gaps between the starts of its last three. A client that keeps a pace (a browser,
// a phone, a poller: a request every fraction of a second to a few seconds) sends its
// next request within about its longest recent gap; its connection waits for it awake,
// in the runtime's poller, for twice that before it parks (Awake), so that a request in
// the pace finds its connection awake: a park and a wake cost more system calls than the
// request itself. A connection without a pace (a single request so far) parks at once.
// 16 bytes, so that a parked connection keeps it.
type Pace struct {
	last      time.Duration // when the last request began, since epoch; 0: none yet
	gap, prev uint32        // the last two gaps, in microseconds (0: not known)
}

// epoch is what Pace.last and Coarse count from (a monotonic reading).
var epoch = time.Now()

// Note records a request that began at now.
func (p *Pace) Note(now time.Time) {
	t := now.Sub(epoch)
	if p.last > 0 {
		g := min((t-p.last)/time.Microsecond, 1<<32-1)
		p.prev, p.gap = p.gap, uint32(max(g, 1))
	}
	p.last = t
}

// Gap is the longer of the last two gaps (0: no pace yet).
func (p *Pace) Gap() time.Duration { return time.Duration(max(p.gap, p.prev)) * time.Microsecond }

// Awake is how long an idle connection with this pace waits for its next request before
// it parks: base (the delay without a pace), or twice the longer of its last two gaps
// plus slack when that is longer, up to limit. Twice: a front-end renews its idle
// deadline only once part of the wait is gone, so a request may find the wait half
// spent.
func (p *Pace) Awake(base, slack, limit time.Duration) time.Duration {
	g := p.Gap()
	if g == 0 {
		return base
	}
	return max(base, min(2*g+slack, limit))
}

// Quantum is the grain Coarse rounds deadlines up to.
const Quantum = 250 * time.Millisecond

// Coarse rounds t up to a multiple of Quantum. The runtime keeps a timer whose deadline
// moved later at its old place until that comes, and a processor with nothing to do
// wakes up then only to move it: with idle deadlines renewed at every request of a client
// with a pace, that is a wake-up (a context switch and an epoll_wait) per request.
// Rounded, the deadlines of all connections fall on a few instants per second, and one
// wake-up moves them all.
func Coarse(t time.Time) time.Time {
	d := t.Sub(epoch)
	return t.Add((Quantum - d%Quantum) % Quantum)
}

// Deadline is now+d, made Coarse when d is at least Quantum (a wait that short, as a
// crowd's park delay, is set once and not renewed, and rounding would lengthen it
// several times over).
func Deadline(now time.Time, d time.Duration) time.Time {
	if d < Quantum {
		return now.Add(d)
	}
	return Coarse(now.Add(d))
}
