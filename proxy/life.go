package proxy

import (
	"sync/atomic"

	"github.com/serve-zone/ingress/proxy/internal/park"
)

// connLife is what stays of a client connection across its forms (awake as an tcpConn
// and its clientConn, parked whole, asleep as an h1Sleeper, woken into a new tcpConn and
// clientConn): its one state word (park.Life), which says who owns it now and how to
// end it, and its awake form. Every form points to it, so an Ender collected before the
// connection changed its form (clients.Table.Strike calls its Enders after releasing its
// lock) ends the connection as it is now. 24 bytes.
type connLife struct {
	park.Life
	// cc is the connection's awake form: set when that is made (accept, before the
	// connection is anyone else's; wake, in state Waking, which only its waker moves
	// on from), nil while it sleeps (set in state Sleeping: nothing of the awake form
	// stays alive then), and read by whoever ends the connection once the word says
	// that its form cannot change any more (an ended state, or the awake state it
	// moved from).
	cc *clientConn
}

// newLife is a new connection's life, cc its first form.
func newLife(cc *clientConn) *connLife {
	l := &connLife{cc: cc}
	cc.life = l
	return l
}

// end ends the connection for abuse (clientConn.End, h1Sleeper.End), from any
// goroutine, without blocking. It switches on the state word alone:
//   - Parked or Asleep (idle, without a goroutine): claimed from the parker as Struck,
//     so that its descriptor leaves the parker's epoll set before anything closes it,
//     and ended by EndParked: an HTTP/2 connection aborted (GOAWAY ENHANCE_YOUR_CALM,
//     written by the engine resumed on a goroutine of its own), an HTTP/1.1 one reset;
//   - Sleeping or Waking (a goroutine changes its form): Struck; that goroutine resets
//     it instead of parking or serving it;
//   - New, Idle or Active (a goroutine, or net/http, or a tunnel serves it): Struck, so
//     that its form cannot change any more, and then its awake form ended (endAwake);
//   - Closing (Shutdown or closeNow ends it): its awake form ended alike, so that the
//     end is a reset;
//   - Struck: nothing more.
func (l *connLife) end(s *Server) {
	for {
		switch st := l.State(); st {
		case park.Parked, park.Asleep:
			if c, ok := s.parker.Claim(&l.Life, park.Struck); ok {
				c.EndParked(false) // as Struck says
				return
			}
		case park.Sleeping, park.Waking:
			if l.CompareAndSwap(st, park.Struck) {
				return
			}
		case park.New, park.Idle, park.Active:
			if l.CompareAndSwap(st, park.Struck) {
				l.cc.endAwake()
				return
			}
		case park.Closing:
			if cc := l.cc; cc != nil { // nil: it was asleep
				cc.endAwake()
			}
			return
		default:
			return
		}
	}
}

// lifeHook, when set (tests), is called by the goroutine that changes a connection's
// form once the state word says so: in Sleeping before the sleeper parks, in Waking
// before the woken connection becomes Idle.
var lifeHook atomic.Pointer[func(l *connLife, st park.State)]

func lifeStep(l *connLife, st park.State) {
	if h := lifeHook.Load(); h != nil {
		(*h)(l, st)
	}
}
