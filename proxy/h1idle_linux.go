package proxy

import (
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/serve-zone/ingress/internal/rawnet"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// canPark: Linux can wait for idle connections without a goroutine each.
const canPark = true

// parker waits for parked connections (h1idle.go) on an epoll instance of its own, on
// one goroutine per Server (run, owned by the server's h1 wait group and stopped by
// stop, which Serve calls once nothing can park any more).
//
// A parked connection's descriptor sits in the runtime's netpoller (edge-triggered, no
// goroutine waiting) and in this set at once, registered level-triggered with
// EPOLLONESHOT: bytes or a hang-up that arrived before the registration are reported at
// once, and each registration reports at most once. A connection parked in full (TLS,
// HTTP/2) is registered with its own descriptor as it is (through
// syscall.RawConn.Control, which keeps it from being closed meanwhile), never
// duplicated, so closing the connection leaves no copy behind. A sleeper (a plain
// HTTP/1.1 connection, h1sleep_linux.go) is registered with the duplicate it owns; Go's
// descriptor was closed, and left the runtime's netpoller, before it parked.
//
// Invariant (all under mu): a connection is in state h1Parked if and only if it is in
// byFd at its descriptor and registered in the epoll set with its current park number
// (parkRec.seq) in the event's data. Leaving h1Parked (claim) removes both in the same
// critical section, before the claimer does anything else with the connection; only the
// claimer may then close it. Hence:
//   - EPOLL_CTL_DEL always precedes the close, so a descriptor number reused by a new
//     connection never has a registration of the old one;
//   - an event that EpollWait returned before a claim, and that run looks at after it
//     (the connection closed by Shutdown, or unparked and parked again, meanwhile), is
//     stale: its park number does not match the connection now at that descriptor, or
//     nothing is parked there, and it is ignored;
//   - exactly one party (run on readiness or at the idle deadline, Shutdown's closeIdle,
//     closeNow's closeAll, endSleepers, a strike's End, stop) wins a parked connection,
//     so it is served or closed, and counted closed, once.
type parker struct {
	s     *Server
	epfd  int // our epoll instance
	wake  int // an eventfd in the set: stop, and a park into an empty queue
	epoch time.Time
	// ep is epfd as a file in the runtime's poller (an epoll instance is readable while
	// it has events): run waits in it like any goroutine on a socket, never in a
	// blocking epoll_wait, which held a thread of its own and handed the processor back
	// and forth at every wake (wait).
	ep   *os.File
	epRC syscall.RawConn

	mu sync.Mutex
	// byFd is the parked connection at each descriptor (nil: none). A slice indexed by
	// descriptor: 16 bytes per descriptor number up to the highest parked, no per-park
	// allocation.
	byFd []parkee
	// queue holds the parks in the order they happened, for the idle timeout: entries
	// of connections that left h1Parked since are stale and skipped (and compacted away
	// when they outnumber the live ones).
	queue   []parkEntry
	head    int    // queue[head:] is pending
	live    int    // connections parked now
	seq     uint64 // the last park number given
	asleep  bool   // run waits with no timeout (nothing was queued): a park must wake it
	stopped bool
	// addFailed: a registration failed and was logged (once per server).
	addFailed bool

	// The memory release after a wave of parks (Config.ReleaseIdleMemory).
	lastPark    time.Duration // since epoch
	wave        int           // parks since the last release
	lastRelease time.Duration // since epoch; -releaseEvery at first
	releasing   bool          // a release goroutine runs
	tail        bool          // the last release was a wave's: parks after it get one more
}

// parkEntry is one park in the timeout queue.
type parkEntry struct {
	c        parkee
	seq      uint64
	deadline time.Duration // since epoch: when the idle timeout ends
}

// parkBatch is how many events one EpollWait returns at most.
const parkBatch = 128

// The memory release after a wave of parks (Config.ReleaseIdleMemory): at least
// releaseWave parks (8 MiB of read buffers back in the pool, and as many goroutine
// stacks freed) since the last release, none for releaseQuiet, and releaseEvery since
// the last release. A wave that a pause of its clients cut in two (a release came
// before its last parks) gets one more release for its tail, however short, once
// releaseEvery has passed (parker.tail).
const (
	releaseWave  = 1024
	releaseQuiet = time.Second
	releaseEvery = time.Minute
)

func newParker(s *Server) (*parker, error) {
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
	p := &parker{s: s, epfd: epfd, wake: wake, epoch: time.Now(), lastRelease: -releaseEvery}
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

// park registers c, whose serving goroutine is about to end; false when the connection
// is not in its awake state any more (Shutdown closed it), the server drains (checked
// under mu: endSleepers, which runs after draining is set, then finds every sleeper
// that parked), the parker stopped, or the registration failed (c is then as it was).
func (p *parker) park(c parkee) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	rec := c.parkRec()
	if p.stopped || p.s.draining.Load() || !rec.state.CompareAndSwap(rec.awake, h1Parked) {
		return false
	}
	// From here c is h1Parked: closeIdle and closeAll claim it (under mu) instead of
	// closing it, so its descriptor stays open while we hold mu.
	p.seq++
	seq := p.seq
	var fd int
	err := c.control(func(d uintptr) {
		fd = int(d)
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(fd), Pad: int32(uint32(seq))}
		err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
		if err != nil {
			fd = -1
			if !p.addFailed { // once: the next ones most likely fail alike (ENOSPC, ENOMEM)
				p.addFailed = true
				p.s.log.Warn("an idle connection cannot park; such connections keep their goroutine",
					zap.Error(os.NewSyscallError("epoll_ctl", err)))
			}
		}
	})
	if err != nil || fd < 0 {
		rec.state.Store(rec.awake) // nobody else moves it out of h1Parked: we hold mu
		return false
	}
	if fd >= len(p.byFd) {
		p.byFd = append(p.byFd, make([]parkee, fd+1-len(p.byFd)+len(p.byFd)/2)...)
	}
	p.byFd[fd] = c
	rec.seq, rec.fd = seq, fd
	p.live++
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
	}
	p.lastPark = time.Since(p.epoch)
	p.wave++
	p.queue = append(p.queue, parkEntry{c: c, seq: seq, deadline: c.parkedDeadline().Sub(p.epoch)})
	if p.asleep || p.releaseInView() {
		p.asleep = false
		p.signal() // run waits with no timeout, or without the release in view
	}
	return true
}

// noteHandshake counts a completed QUIC handshake into the memory release's wave
// (Config.ReleaseIdleMemory) as a park: HTTP/3 connections never park, but a wave of
// them leaves each handshake's garbage behind just as a wave of TCP connections does,
// and an idle server allocates too little to collect it for minutes (issue 26: about
// 15 % of an idle HTTP/3 connection's RSS). Nil-safe.
func (p *parker) noteHandshake() {
	if p == nil || !p.s.cfg.ReleaseIdleMemory {
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
		p.signal() // run computes its wait with the release in view
	}
}

// signal wakes run (under mu, so that run has not closed wake yet).
func (p *parker) signal() {
	one := uint64(1)
	_, _ = unix.Write(p.wake, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// claim takes the parked c out of the parker for the caller, who then closes it; false
// when c is not parked (any more).
func (p *parker) claim(c parkee) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unregister(c, h1Closing)
}

// unregister moves c from h1Parked to state to and removes its registration and record
// (under mu); false when c is not parked.
func (p *parker) unregister(c parkee, to int32) bool {
	rec := c.parkRec()
	if !rec.state.CompareAndSwap(h1Parked, to) {
		return false
	}
	// The descriptor is open (a parked connection is closed only by its claimer, after
	// this), so DEL cannot hit another connection's registration; Control makes sure.
	_ = c.control(func(fd uintptr) {
		_ = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
	if p.byFd[rec.fd] == c {
		p.byFd[rec.fd] = nil
	}
	p.live--
	return true
}

// stop claims and closes whatever is still parked, stops run and makes park refuse.
func (p *parker) stop() {
	var left []parkee
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	for _, c := range p.byFd {
		if c != nil && p.unregister(c, h1Closing) {
			left = append(left, c)
		}
	}
	p.queue, p.head = nil, 0
	p.signal()
	p.mu.Unlock()
	for _, c := range left {
		c.endParked(false)
	}
}

// run is the parker's goroutine: it starts a serving goroutine for each parked
// connection that became readable, closes those whose client hung up with nothing left
// to read, and ends those idle past their deadline (gracefully: an HTTP/2 connection
// sends its GOAWAY), until stop.
func (p *parker) run() {
	defer func() {
		_ = unix.Close(p.wake)
		_ = p.ep.Close() // epfd
	}()
	events := make([]unix.EpollEvent, parkBatch)
	var ready, hungUp, expired []parkee // to serve, to close, to end
	for {
		n, err := p.wait(events)
		if err != nil {
			// Only a bug makes epoll_wait fail (EBADF, EFAULT, EINVAL): log, do not spin.
			p.s.log.Error("waiting for parked connections", zap.Error(os.NewSyscallError("epoll_wait", err)))
			time.Sleep(parkTick)
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
			if c == nil || uint32(c.parkRec().seq) != uint32(ev.Pad) || c.parkRec().state.Load() != h1Parked {
				continue // stale: claimed (and maybe parked again) since EpollWait returned
			}
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 && !p.pending(c) {
				// The client hung up and sent nothing more: close here, without a
				// goroutine and a read buffer only to read the end (a mass disconnect
				// would otherwise be a burst of them).
				p.unregister(c, h1Closing)
				hungUp = append(hungUp, c)
				continue
			}
			p.unregister(c, c.parkRec().awake)
			ready = append(ready, c)
		}
		expired = p.expire(expired)
		release, parked := p.releaseDue(), p.live
		p.mu.Unlock()
		if release {
			// Added while run's own count holds the group above zero.
			p.s.h1.wg.Go(func() { p.release(parked) })
		}
		for i, c := range ready {
			p.s.h1.wg.Go(c.unparked) // as the release above
			ready[i] = nil
		}
		for i, c := range hungUp {
			c.endParked(false)
			hungUp[i] = nil
		}
		for i, c := range expired {
			c.endParked(true)
			expired[i] = nil
		}
		ready, hungUp, expired = ready[:0], hungUp[:0], expired[:0]
	}
}

// wait returns the parked connections' events, at most len(events), once there are any
// or waitMillis has passed (then none): epoll_wait without a timeout inside
// RawConn.Read on the epoll instance, so that the goroutine waits in the runtime's poller
// (its deadline for the timeout) instead of blocking a thread in the system call.
func (p *parker) wait(events []unix.EpollEvent) (int, error) {
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
func (p *parker) pending(c parkee) bool {
	var b [1]byte
	n := 0
	_ = c.control(func(fd uintptr) {
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
func (p *parker) expire(out []parkee) []parkee {
	now := time.Since(p.epoch)
	for p.head < len(p.queue) {
		e := &p.queue[p.head]
		if p.valid(e) {
			if e.deadline > now {
				break
			}
			p.unregister(e.c, h1Closing)
			out = append(out, e.c)
		}
		*e = parkEntry{}
		p.head++
	}
	p.compact()
	return out
}

// valid reports whether e is the current park of a connection still parked.
func (p *parker) valid(e *parkEntry) bool {
	rec := e.c.parkRec()
	return rec.state.Load() == h1Parked && rec.seq == e.seq
}

// compact drops the queue's consumed front and, when stale entries (connections that
// unparked before their deadline) outnumber the live ones, those too: amortised, the
// queue stays within a small factor of the connections parked.
func (p *parker) compact() {
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

// waitMillis is EpollWait's timeout: until the first tick after the oldest pending park's
// deadline or the next memory release, or none (-1) when there is neither (a park wakes
// run then).
func (p *parker) waitMillis() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.head < len(p.queue) && !p.valid(&p.queue[p.head]) {
		p.queue[p.head] = parkEntry{}
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
	d = (d + parkTick - 1) / parkTick * parkTick
	return int(d / time.Millisecond)
}

// releaseAt is when the next memory release is due, if one is in view (under mu).
func (p *parker) releaseAt() (time.Duration, bool) {
	if !p.s.cfg.ReleaseIdleMemory || p.releasing || p.wave < releaseWave && !(p.tail && p.wave > 0) {
		return 0, false
	}
	return max(p.lastPark+releaseQuiet, p.lastRelease+releaseEvery), true
}

// releaseInView reports whether the park or handshake just counted brought a release
// into view (the wave's 1,024th, or a tail's first), so that run computes its wait anew
// (under mu).
func (p *parker) releaseInView() bool {
	return p.s.cfg.ReleaseIdleMemory && (p.wave == releaseWave || p.tail && p.wave == 1)
}

// releaseDue reports whether a memory release is due now, and then marks it begun
// (under mu).
func (p *parker) releaseDue() bool {
	at, ok := p.releaseAt()
	if !ok || at > time.Since(p.epoch) {
		return false
	}
	p.tail = p.wave >= releaseWave // a wave's release arms one for its tail, a tail's does not
	p.wave, p.lastRelease, p.releasing = 0, time.Since(p.epoch), true
	return true
}

// releaseMsg is release's log line (Debug); the reliability suite waits for it.
const releaseMsg = "returned idle connections' memory to the OS"

// release returns the memory a wave of parks left behind to the operating system: the
// read buffers went back to h1ReadBufs, which keeps them until the second collection
// after, and the serving goroutines' stacks are freed at the next one; FreeOSMemory's
// own collection is the second, and it then returns every free page at once instead of
// leaving that to the background scavenger, which keeps what the heap goal of the burst
// allows. An idle server would otherwise not collect for minutes (it allocates little).
// It runs on its own goroutine so that run keeps serving readiness meanwhile.
func (p *parker) release(parked int) {
	start := time.Now()
	runtime.GC()
	debug.FreeOSMemory()
	p.s.log.Debug(releaseMsg, zap.Int("parked", parked), zap.Duration("took", time.Since(start)))
	p.mu.Lock()
	p.releasing = false
	if !p.stopped {
		p.signal() // parks meanwhile may make the next release due
	}
	p.mu.Unlock()
}

// parkedNow is how many connections are parked (tests); 0 for a nil parker.
func (p *parker) parkedNow() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// readableFn returns awaitIdle's RawConn.Read callback (made once per connection): done
// when the socket holds a byte, its end or an error, found with a non-blocking peek
// (RawConn.Read forgets the readiness the poller knew, so it must look before it waits).
func (c *h1Conn) readableFn() func(fd uintptr) bool {
	if c.readable == nil {
		var b [1]byte
		c.readable = func(fd uintptr) bool {
			for {
				_, err := rawnet.Peek(int(fd), b[:])
				if err != syscall.EINTR {
					return err != syscall.EAGAIN
				}
			}
		}
	}
	return c.readable
}
