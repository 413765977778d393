package park

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// CanPark: Linux can wait for idle connections without a goroutine each.
const CanPark = true

// Parker waits for parked connections on an epoll instance of its own, on one
// goroutine (Run, owned by its owner, ended by Stop).
//
// A parked connection's descriptor is registered level-triggered with EPOLLONESHOT:
// bytes or a hang-up that arrived before the registration are reported at once, and
// each registration reports at most once. A connection parked whole is registered with
// its own descriptor (through syscall.RawConn.Control, which keeps it from being closed
// meanwhile), never duplicated, so closing the connection leaves no copy behind; a
// sleeping one with the duplicate it owns ([FD]).
//
// Invariant (all under mu): a connection is Parked or Asleep if and only if it is in
// byFd at its descriptor and registered in the epoll set with its current park number
// in the event's data. Leaving those states (readable, claimed) removes both in the same
// critical section, before the connection's new owner does anything with it; only that
// owner may then close it. Hence:
//   - EPOLL_CTL_DEL always precedes the close, so a descriptor number reused by a new
//     connection never has a registration of the old one;
//   - an event that epoll_wait returned before a claim, and that Run looks at after it
//     (the connection claimed, or unparked and parked again, meanwhile), is stale: its
//     park number does not match the connection now at that descriptor, or nothing is
//     parked there, and it is ignored;
//   - exactly one party (Run on readiness, at the idle deadline or at a hang-up, Claim,
//     ClaimAll, Stop) wins a parked connection, so it is served or ended once.
type Parker struct {
	cfg   Config
	epfd  int // our epoll instance
	wake  int // an eventfd in the set: Stop, and a park into an empty queue
	epoch time.Time
	// ep is epfd as a file in the runtime's poller (an epoll instance is readable while
	// it has events): Run waits in it like any goroutine on a socket, never in a
	// blocking epoll_wait, which held a thread of its own and handed the processor back
	// and forth at every wake (wait).
	ep   *os.File
	epRC syscall.RawConn

	mu sync.Mutex
	// byFd is the parked connection at each descriptor (nil: none). A slice indexed by
	// descriptor: 16 bytes per descriptor number up to the highest parked, no per-park
	// allocation.
	byFd []Parkee
	// queue holds the parks in the order they happened, for the idle timeout: entries
	// of connections that left the Parker since are stale and skipped (and compacted
	// away when they outnumber the live ones).
	queue   []entry
	head    int    // queue[head:] is pending
	live    int    // connections parked now
	seq     uint32 // the last park number given
	asleep  bool   // Run waits with no timeout (nothing was queued): a park must wake it
	stopped bool
	// addFailed: a registration failed and was reported (once per Parker).
	addFailed bool

	// The memory release after a wave of parks (Config.ReleaseIdleMemory).
	lastPark    time.Duration // since epoch
	wave        int           // parks since the last release
	lastRelease time.Duration // since epoch; -releaseEvery at first
	releasing   bool          // a release goroutine runs
	tail        bool          // the last release was a wave's: parks after it get one more
}

// entry is one park in the timeout queue.
type entry struct {
	c        Parkee
	seq      uint32
	deadline time.Duration // since epoch: when the idle timeout ends
}

// batch is how many events one epoll_wait returns at most.
const batch = 128

// NewParker makes a Parker; its owner starts Run and ends it with Stop.
func NewParker(cfg Config) (*Parker, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, os.NewSyscallError("eventfd", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake), Pad: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		_ = unix.Close(wake)
		_ = unix.Close(epfd)
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	p := newParker(cfg)
	p.epfd, p.wake = epfd, wake
	if err := unix.SetNonblock(epfd, true); err != nil {
		_ = unix.Close(wake)
		_ = unix.Close(epfd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	p.ep = os.NewFile(uintptr(epfd), "parker") // non-blocking: in the runtime's poller
	if p.epRC, err = p.ep.SyscallConn(); err != nil {
		_ = unix.Close(wake)
		_ = p.ep.Close()
		return nil, err
	}
	return p, nil
}

// newParker is a Parker without its epoll instance (NewParker's, and the tests' of its
// queue and release).
func newParker(cfg Config) *Parker {
	return &Parker{cfg: cfg, epfd: -1, wake: -1, epoch: time.Now(), lastRelease: -releaseEvery}
}

// Park registers c, whose serving goroutine is about to end, until deadline (its idle
// timeout). It reports whether the Parker took it: c was Idle or Active (then it is
// Parked) or Sleeping (then Asleep). False when c is in another state (ended
// meanwhile), Config.Refuse refuses, the Parker stopped, or the registration failed;
// c is then as it was.
func (p *Parker) Park(c Parkee, deadline time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := c.Life()
	st := l.State()
	to, back := Parked, st
	switch st {
	case Idle, Active:
	case Sleeping:
		to, back = Asleep, Waking
	default:
		return false
	}
	if p.stopped || p.cfg.Refuse != nil && p.cfg.Refuse() || !l.CompareAndSwap(st, to) {
		return false
	}
	// From here c is held: whoever ends it claims it (under mu) instead of closing it,
	// so its descriptor stays open while we hold mu.
	p.seq++
	seq := p.seq
	fd := -1
	err := c.Control(func(d uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(d), Pad: int32(seq)}
		if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(d), &ev); err != nil {
			if !p.addFailed { // once: the next ones most likely fail alike (ENOSPC, ENOMEM)
				p.addFailed = true
				p.failed(fmt.Errorf("%w: %w", ErrRegister, os.NewSyscallError("epoll_ctl", err)))
			}
			return
		}
		fd = int(d)
	})
	if err != nil || fd < 0 {
		l.state.Store(int32(st)) // nobody else moves it out of to: we hold mu
		return false
	}
	if fd >= len(p.byFd) {
		p.byFd = append(p.byFd, make([]Parkee, fd+1-len(p.byFd)+len(p.byFd)/2)...)
	}
	p.byFd[fd] = c
	l.fd, l.seq, l.back = int32(fd), seq, back
	p.live++
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	}
	p.lastPark = time.Since(p.epoch)
	p.wave++
	p.queue = append(p.queue, entry{c: c, seq: seq, deadline: deadline.Sub(p.epoch)})
	if p.asleep || p.releaseInView() {
		p.asleep = false
		p.signal() // Run waits with no timeout, or without the release in view
	}
	return true
}

// NoteHandshake counts a connection that never parks (a QUIC handshake, in the proxy)
// into the memory release's wave as a park: a wave of them leaves each handshake's
// garbage behind just as a wave of parks does, and an idle server allocates too little
// to collect it for minutes. Nil-safe.
func (p *Parker) NoteHandshake() {
	if p == nil || !p.cfg.ReleaseIdleMemory {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.lastPark = time.Since(p.epoch)
	p.wave++
	if p.releaseInView() {
		p.asleep = false
		p.signal() // Run computes its wait with the release in view
	}
}

// signal wakes Run (under mu, so that Run has not closed wake yet).
func (p *Parker) signal() {
	if p.wake < 0 {
		return
	}
	one := uint64(1)
	_, _ = unix.Write(p.wake, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// Claim takes the connection l belongs to out of the Parker for the caller, who then
// ends it: it was Parked or Asleep and is now in state to (Closing or Struck). False
// when it is not held (any more). Nil-safe.
func (p *Parker) Claim(l *Life, to State) (Parkee, bool) {
	if p == nil {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := l.State()
	if !st.Held() || int(l.fd) >= len(p.byFd) {
		return nil, false
	}
	c := p.byFd[l.fd]
	if c == nil || c.Life() != l || !p.unregister(c, st, to) {
		return nil, false
	}
	return c, true
}

// ClaimAll claims every connection held in state from, moving it to to (Closing or
// Struck), and returns them for the caller to end. Nil-safe.
func (p *Parker) ClaimAll(from, to State) []Parkee {
	if p == nil {
		return nil
	}
	var out []Parkee
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.byFd {
		if c != nil && p.unregister(c, from, to) {
			out = append(out, c)
		}
	}
	return out
}

// unregister moves c from from (Parked or Asleep) to to and removes its registration
// and record (under mu); false when c is not in from.
func (p *Parker) unregister(c Parkee, from, to State) bool {
	l := c.Life()
	if !l.CompareAndSwap(from, to) {
		return false
	}
	// The descriptor is open (a held connection is closed only by its claimer, after
	// this), so DEL cannot hit another connection's registration; Control makes sure.
	_ = c.Control(func(fd uintptr) {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
	if p.byFd[l.fd] == c {
		p.byFd[l.fd] = nil
	}
	p.live--
	return true
}

// unregisterHeld is unregister from whichever held state c is in (under mu).
func (p *Parker) unregisterHeld(c Parkee, to State) bool {
	st := c.Life().State()
	return st.Held() && p.unregister(c, st, to)
}

// Stop claims and ends whatever is still parked (EndParked(false)), stops Run and
// makes Park refuse.
func (p *Parker) Stop() {
	var left []Parkee
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	for _, c := range p.byFd {
		if c != nil && p.unregisterHeld(c, Closing) {
			left = append(left, c)
		}
	}
	p.queue, p.head = nil, 0
	p.signal()
	p.mu.Unlock()
	for _, c := range left {
		c.EndParked(false)
	}
}

// Run is the Parker's goroutine: it starts a serving goroutine for each parked
// connection that became readable, ends those whose client hung up with nothing left
// to read, and those idle past their deadline (gracefully), until Stop.
func (p *Parker) Run() {
	defer func() {
		_ = unix.Close(p.wake)
		_ = p.ep.Close() // epfd
	}()
	events := make([]unix.EpollEvent, batch)
	var ready, hungUp, expired []Parkee // to serve, to close, to end
	for {
		n, err := p.wait(events)
		if err != nil {
			// Only a bug makes epoll_wait fail (EBADF, EFAULT, EINVAL): report, do not spin.
			p.failed(fmt.Errorf("%w: %w", ErrWait, os.NewSyscallError("epoll_wait", err)))
			time.Sleep(Tick)
		}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			return
		}
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			if fd == p.wake && ev.Pad == -1 {
				var b [8]byte
				_, _ = unix.Read(p.wake, b[:])
				continue
			}
			if fd < 0 || fd >= len(p.byFd) {
				continue
			}
			c := p.byFd[fd]
			if c == nil {
				continue
			}
			l := c.Life()
			st := l.State()
			if l.seq != uint32(ev.Pad) || !st.Held() {
				continue // stale: claimed (and maybe parked again) since epoll_wait returned
			}
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 && !p.pending(c) {
				// The client hung up and sent nothing more: ended here, without a
				// goroutine and a read buffer only to read the end (a mass disconnect
				// would otherwise be a burst of them).
				p.unregister(c, st, Closing)
				hungUp = append(hungUp, c)
				continue
			}
			p.unregister(c, st, l.back)
			ready = append(ready, c)
		}
		expired = p.expire(expired)
		release, parked := p.releaseDue(), p.live
		p.mu.Unlock()
		if release {
			// Added while Run's own goroutine keeps its owner's group above zero.
			p.cfg.Go(func() { p.release(parked) })
		}
		for i, c := range ready {
			p.cfg.Go(c.Unparked) // as the release above
			ready[i] = nil
		}
		for i, c := range hungUp {
			c.EndParked(false)
			hungUp[i] = nil
		}
		for i, c := range expired {
			c.EndParked(true)
			expired[i] = nil
		}
		ready, hungUp, expired = ready[:0], hungUp[:0], expired[:0]
	}
}

func (p *Parker) failed(err error) {
	if p.cfg.Failed != nil {
		p.cfg.Failed(err)
	}
}

// wait returns the parked connections' events, at most len(events), once there are any
// or waitMillis has passed (then none): epoll_wait without a timeout inside
// RawConn.Read on the epoll instance, so that the goroutine waits in the runtime's poller
// (its deadline for the timeout) instead of blocking a thread in the system call.
func (p *Parker) wait(events []unix.EpollEvent) (int, error) {
	var at time.Time // none
	if ms := p.waitMillis(); ms >= 0 {
		at = time.Now().Add(time.Duration(ms) * time.Millisecond)
	}
	_ = p.ep.SetReadDeadline(at)
	var n int
	var werr error
	err := p.epRC.Read(func(fd uintptr) bool {
		for {
			n, werr = unix.EpollWait(int(fd), events, 0)
			if werr != unix.EINTR {
				return n != 0 || werr != nil
			}
		}
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return n, werr
}

// pending reports whether the parked c has bytes to read (a request pipelined before
// the client's FIN): one non-blocking MSG_PEEK (under mu).
func (p *Parker) pending(c Parkee) bool {
	var b [1]byte
	n := 0
	_ = c.Control(func(fd uintptr) {
		for {
			var err error
			n, _, err = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err != unix.EINTR {
				return
			}
		}
	})
	return n > 0
}

// expire claims the parked connections whose idle timeout has ended, appending them to
// out (under mu). It pops the queue's front while that is stale or due: the queue is in
// park order, so this is a scan of what is due, not of everything parked.
func (p *Parker) expire(out []Parkee) []Parkee {
	now := time.Since(p.epoch)
	for p.head < len(p.queue) {
		e := &p.queue[p.head]
		if p.valid(e) {
			if e.deadline > now {
				break
			}
			p.unregisterHeld(e.c, Closing)
			out = append(out, e.c)
		}
		*e = entry{}
		p.head++
	}
	p.compact()
	return out
}

// valid reports whether e is the current park of a connection still held.
func (p *Parker) valid(e *entry) bool {
	l := e.c.Life()
	return l.State().Held() && l.seq == e.seq
}

// compact drops the queue's consumed front and, when stale entries (connections that
// unparked before their deadline) outnumber the live ones, those too: amortised, the
// queue stays within a small factor of the connections parked.
func (p *Parker) compact() {
	pending := len(p.queue) - p.head
	if p.head > 1024 && p.head > pending {
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
	if pending > 1024 && pending > 2*p.live {
		q := p.queue[:0]
		for i := p.head; i < len(p.queue); i++ {
			if p.valid(&p.queue[i]) {
				q = append(q, p.queue[i])
			}
		}
		clear(p.queue[len(q):])
		p.queue, p.head = q, 0
	}
}

// waitMillis is epoll_wait's timeout: until the first tick after the oldest pending
// park's deadline or the next memory release, or none (-1) when there is neither (a
// park wakes Run then).
func (p *Parker) waitMillis() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.head < len(p.queue) && !p.valid(&p.queue[p.head]) {
		p.queue[p.head] = entry{}
		p.head++
	}
	due := time.Duration(-1)
	if p.head < len(p.queue) {
		due = p.queue[p.head].deadline
	}
	if at, ok := p.releaseAt(); ok && (due < 0 || at < due) {
		due = at
	}
	if due < 0 {
		p.asleep = true
		return -1
	}
	p.asleep = false
	d := due - time.Since(p.epoch)
	if d <= 0 {
		return 0
	}
	d = (d + Tick - 1) / Tick * Tick
	return int(d / time.Millisecond)
}

// releaseAt is when the next memory release is due, if one is in view (under mu).
func (p *Parker) releaseAt() (time.Duration, bool) {
	if !p.cfg.ReleaseIdleMemory || p.releasing || p.wave < releaseWave && !(p.tail && p.wave > 0) {
		return 0, false
	}
	return max(p.lastPark+releaseQuiet, p.lastRelease+releaseEvery), true
}

// releaseInView reports whether the park or handshake just counted brought a release
// into view (the wave's 1,024th, or a tail's first), so that Run computes its wait anew
// (under mu).
func (p *Parker) releaseInView() bool {
	return p.cfg.ReleaseIdleMemory && (p.wave == releaseWave || p.tail && p.wave == 1)
}

// releaseDue reports whether a memory release is due now, and then marks it begun
// (under mu).
func (p *Parker) releaseDue() bool {
	at, ok := p.releaseAt()
	if !ok || at > time.Since(p.epoch) {
		return false
	}
	p.tail = p.wave >= releaseWave // a wave's release arms one for its tail, a tail's does not
	p.wave, p.lastRelease, p.releasing = 0, time.Since(p.epoch), true
	return true
}

// release returns the memory a wave of parks left behind to the operating system: what
// the parked connections gave back (pooled buffers, freed goroutine stacks) is free
// after the next collection or two; FreeOSMemory's own collection is the second, and it
// then returns every free page at once instead of leaving that to the background
// scavenger, which keeps what the heap goal of the burst allows. An idle server would
// otherwise not collect for minutes (it allocates little). It runs on its own goroutine
// so that Run keeps serving readiness meanwhile.
func (p *Parker) release(parked int) {
	start := time.Now()
	runtime.GC()
	debug.FreeOSMemory()
	if p.cfg.Released != nil {
		p.cfg.Released(parked, time.Since(start))
	}
	p.mu.Lock()
	p.releasing = false
	if !p.stopped {
		p.signal() // parks meanwhile may make the next release due
	}
	p.mu.Unlock()
}

// Len is how many connections are parked (Parked or Asleep); 0 for a nil Parker.
func (p *Parker) Len() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// Count is how many connections are held in state st (Parked or Asleep); 0 for a nil
// Parker.
func (p *Parker) Count(st State) int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.byFd {
		if c != nil && c.Life().State() == st {
			n++
		}
	}
	return n
}
