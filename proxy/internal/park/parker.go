package park

import (
	"errors"
	"time"
)

// Parkee is a connection as the Parker sees it: one that waits for its client without
// a goroutine or a buffer. The Parker knows it by its Life (its state and its
// registration) and its descriptor, and gives it back through Unparked (readable) or
// EndParked (its end, claimed by the Parker itself).
type Parkee interface {
	// Life is the connection's state word, shared by all its forms.
	Life() *Life
	// Control runs f with the descriptor to watch, which stays open while f runs; an
	// error when it is closed.
	Control(f func(fd uintptr)) error
	// Unparked serves the connection on once it is readable (its state is back to the
	// awake state it parked from, or Waking), on a goroutine Config.Go started.
	Unparked()
	// EndParked ends a connection the Parker claimed (its state is Closing): graceful
	// (the idle timeout) tells the client first where the protocol can; otherwise (the
	// client hung up, the Parker stops) it closes at once. It must not block the
	// Parker: a close that may wait belongs on a goroutine of Config.Go's.
	EndParked(graceful bool)
}

// Config is what a Parker needs of its owner.
type Config struct {
	// Go runs f on a goroutine its owner waits for (Unparked, EndParked's own
	// goroutines, the memory release).
	Go func(f func())
	// Refuse is asked under the Parker's lock at each park: true refuses it (the
	// owner drains). An owner that sets what Refuse reports and then calls ClaimAll
	// finds every connection that parked before.
	Refuse func() bool
	// ReleaseIdleMemory returns the memory a wave of parks left behind to the OS.
	ReleaseIdleMemory bool
	// Released is told of each release: how many were parked, how long it took.
	Released func(parked int, took time.Duration)
	// Failed is told why the Parker could not do its work: ErrRegister (once: parks
	// fail alike after the first, and the connection keeps its goroutine) or
	// ErrWait (each time; only a bug makes it fail).
	Failed func(err error)
}

var (
	// ErrRegister: a connection could not be registered; it did not park.
	ErrRegister = errors.New("park: an idle connection cannot park; such connections keep their goroutine")
	// ErrWait: waiting for parked connections failed.
	ErrWait = errors.New("park: waiting for parked connections failed")
)

// Tick is the idle timeout's granularity: the Parker rounds its wait for the oldest
// park's deadline up to a multiple of Tick and then ends everything due, so however
// many deadlines fall in a second, they cost at most 1/Tick wake-ups. A parked
// connection ends at its deadline or up to Tick later, plus however far park order is
// from deadline order (the timeout queue is in park order), never earlier.
const Tick = 250 * time.Millisecond

// The memory release after a wave of parks (Config.ReleaseIdleMemory): at least
// releaseWave parks (8 MiB of read buffers back in a pool, and as many goroutine stacks
// freed, in the proxy) since the last release, none for releaseQuiet, and releaseEvery
// since the last release. A wave that a pause of its clients cut in two (a release came
// before its last parks) gets one more release for its tail, however short, once
// releaseEvery has passed (Parker.tail).
const (
	releaseWave  = 1024
	releaseQuiet = time.Second
	releaseEvery = time.Minute
)
