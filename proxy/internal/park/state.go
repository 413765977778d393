package park

import (
	"strconv"
	"sync/atomic"
)

// State is who owns a connection now, and so how to end it. Every form a connection
// takes (awake on a goroutine, parked whole, compacted while asleep, woken into a new
// form) shares one [Life], and with it one State: whoever ends the connection switches
// on this one word and never follows one form to the next.
//
//	New ─▶ Active ◀─▶ Idle ─▶ Sleeping ─▶ Asleep ─▶ Waking ─▶ Idle
//	            ▲  ▲    │        │          │  │
//	            │  └─ Parked ◀───┘ (readable: back to Idle or Active)
//	  ended from any state above: Closing (Shutdown, the idle timeout, a hang-up,
//	  stop) or Struck (abuse); both are final.
//
// Who moves it:
//   - its owner (the goroutine that serves it, or a server it was handed to): New, Idle
//     and Active among themselves; Idle to Sleeping, and Sleeping on to Closing or
//     Waking when [Parker.Park] refused it; Waking to Idle once it woke; an awake state
//     to Closing or Struck when it ends;
//   - the [Parker], under its lock: Idle or Active to Parked and Sleeping to Asleep
//     ([Parker.Park]), back to the awake state or Waking when readable, and Parked or
//     Asleep to Closing or Struck when someone claims it ([Parker.Claim]);
//   - anyone ending it: an awake or changing state (New, Idle, Active, Sleeping,
//     Waking) to Closing or Struck by compare-and-swap, after which its owner ends it;
//     a parked one only through [Parker.Claim].
//
// So exactly one party wins a connection at each step: a compare-and-swap decides it,
// and a connection's form changes (park, sleep, wake) only from a state that nobody
// ended.
type State int32

const (
	// New: accepted; its goroutine owns it and has read nothing yet.
	New State = iota
	// Idle: its goroutine waits for the next request (end it by shutting its socket
	// down).
	Idle
	// Active: its goroutine, or a server it was handed to, reads or serves.
	Active
	// Parked: the Parker holds it whole, without a goroutine; claim it to end it.
	Parked
	// Sleeping: its goroutine turns it into its compact form (the descriptor
	// duplicated, the Go connection closed) and parks that.
	Sleeping
	// Asleep: the Parker holds its compact form; claim it to end it.
	Asleep
	// Waking: a goroutine rebuilds its Go connection from its compact form.
	Waking
	// Closing: ended (a graceful or hard stop, the idle timeout, a hang-up, the Parker's
	// stop); its owner closes it.
	Closing
	// Struck: ended for abuse; its owner resets it.
	Struck
)

var stateNames = [...]string{"new", "idle", "active", "parked", "sleeping", "asleep", "waking", "closing", "struck"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Ended reports whether s is final: Closing or Struck.
func (s State) Ended() bool { return s == Closing || s == Struck }

// Held reports whether the Parker holds a connection in state s: Parked or Asleep.
func (s State) Held() bool { return s == Parked || s == Asleep }

// Life is a connection's state word, shared by every form the connection takes, with
// its registration in the Parker. The zero Life is New. 16 bytes.
type Life struct {
	state atomic.Int32
	// The Parker's, under its lock, while the connection is Parked or Asleep:
	fd   int32  // the descriptor registered
	seq  uint32 // the park number, in the registration's event
	back State  // what readiness makes it: the awake state it parked from, or Waking
}

// State is the connection's state now.
func (l *Life) State() State { return State(l.state.Load()) }

// CompareAndSwap moves the connection from old to new if it is in old.
func (l *Life) CompareAndSwap(old, new State) bool {
	return l.state.CompareAndSwap(int32(old), int32(new))
}
