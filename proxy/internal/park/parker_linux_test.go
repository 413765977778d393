package park

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
	"golang.org/x/sys/unix"
)

// testConn is a parkee over a loopback TCP connection: whole (rc, the Go connection's
// descriptor) or asleep (fd, a duplicate, the Go connection closed).
type testConn struct {
	life     Life
	nc       net.Conn
	rc       syscall.RawConn
	fd       FD // >= 0: asleep on its own descriptor
	unparked chan State
	ended    chan bool // EndParked's graceful
}

func (c *testConn) Life() *Life { return &c.life }

func (c *testConn) Control(f func(fd uintptr)) error {
	if c.fd >= 0 {
		return c.fd.Control(f)
	}
	return c.rc.Control(f)
}

func (c *testConn) Unparked()               { c.unparked <- c.life.State() }
func (c *testConn) EndParked(graceful bool) { c.ended <- graceful }

// pairs returns n server-side testConns in state st (Idle, or Sleeping: then on a
// duplicate descriptor, the Go connection closed) and their clients.
func pairs(t *testing.T, n int, st State) ([]*testConn, []net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var cs []*testConn
	var clients []net.Conn
	for range n {
		cl, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		sc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sc.Close() })
		rc, _ := sc.(*net.TCPConn).SyscallConn()
		c := &testConn{nc: sc, rc: rc, fd: -1, unparked: make(chan State, 1), ended: make(chan bool, 1)}
		c.life.CompareAndSwap(New, Idle)
		if st == Sleeping {
			c.life.CompareAndSwap(Idle, Sleeping)
			if c.fd, err = Dup(rc); err != nil {
				t.Fatal(err)
			}
			_ = sc.Close()
		}
		cs = append(cs, c)
		clients = append(clients, cl)
	}
	return cs, clients
}

// running is a Parker with its Run goroutine, stopped at the test's end.
func running(t *testing.T, cfg Config) *Parker {
	t.Helper()
	var wg sync.WaitGroup
	if cfg.Go == nil {
		cfg.Go = wg.Go
	}
	p, err := NewParker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(p.Run)
	t.Cleanup(func() { p.Stop(); wg.Wait() })
	return p
}

func within(t *testing.T, what string, ch <-chan State) State {
	t.Helper()
	select {
	case st := <-ch:
		return st
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
	return 0
}

// TestParkWakes: a parked connection (whole, and asleep on its own descriptor) is
// Parked or Asleep while it waits; its client's bytes unpark it once, back to the state
// it parked from (Idle) or Waking, with its registration gone (the Parker holds none).
func TestParkWakes(t *testing.T) {
	for _, from := range []State{Idle, Sleeping} {
		t.Run(from.String(), func(t *testing.T) {
			p := running(t, Config{})
			cs, clients := pairs(t, 1, from)
			c := cs[0]
			if !p.Park(c, time.Now().Add(time.Hour)) {
				t.Fatal("Park refused")
			}
			want, back := Parked, Idle
			if from == Sleeping {
				want, back = Asleep, Waking
			}
			if st := c.life.State(); st != want || p.Len() != 1 || p.Count(want) != 1 {
				t.Fatalf("after Park: %s, %d held (%d %s); want %s, 1", st, p.Len(), p.Count(want), want, want)
			}
			if p.Park(c, time.Now().Add(time.Hour)) {
				t.Fatal("a held connection parked twice")
			}
			if _, err := clients[0].Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if st := within(t, "unparked", c.unparked); st != back {
				t.Fatalf("unparked as %s, want %s", st, back)
			}
			if p.Len() != 0 {
				t.Fatalf("%d still held after the wake", p.Len())
			}
			if _, ok := p.Claim(&c.life, Closing); ok {
				t.Fatal("claimed a connection that woke")
			}
			if from == Sleeping {
				nc, err := c.fd.Wake()
				if err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(nc, b); err != nil || b[0] != 'x' {
					t.Fatalf("woken connection read %q, %v", b, err)
				}
			}
		})
	}
}

// TestClaimWinsOnce: many parties claim one parked connection at once: exactly one
// wins, it is in the state its winner asked for, and its descriptor has left the epoll
// set before the winner closes it (a write by the client then wakes nothing).
func TestClaimWinsOnce(t *testing.T) {
	p := running(t, Config{})
	cs, clients := pairs(t, 1, Idle)
	c := cs[0]
	if !p.Park(c, time.Now().Add(time.Hour)) {
		t.Fatal("Park refused")
	}
	var wg sync.WaitGroup
	wins := make(chan State, 8)
	for i := range 8 {
		to := Closing
		if i%2 == 1 {
			to = Struck
		}
		wg.Go(func() {
			if _, ok := p.Claim(&c.life, to); ok {
				wins <- to
			}
		})
	}
	wg.Wait()
	close(wins)
	var won []State
	for st := range wins {
		won = append(won, st)
	}
	if len(won) != 1 || c.life.State() != won[0] {
		t.Fatalf("winners %v, state %s; want one winner and its state", won, c.life.State())
	}
	if _, err := clients[0].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-c.unparked:
		t.Fatalf("a claimed connection was unparked (%s)", st)
	case <-time.After(3 * Tick):
	}
	if p.Len() != 0 {
		t.Fatalf("%d held after the claim", p.Len())
	}
}

// TestParkRefused: an ended connection, one in a state that does not park, a refusing
// owner and a stopped Parker all refuse a park and leave the state as it was.
func TestParkRefused(t *testing.T) {
	refuse := false
	var mu sync.Mutex
	p := running(t, Config{Refuse: func() bool { mu.Lock(); defer mu.Unlock(); return refuse }})
	cs, _ := pairs(t, 4, Idle)
	for i, st := range []State{Closing, Struck, New} {
		c := cs[i]
		c.life.state.Store(int32(st))
		if p.Park(c, time.Now().Add(time.Hour)) || c.life.State() != st {
			t.Fatalf("a %s connection parked, or changed: %s", st, c.life.State())
		}
	}
	mu.Lock()
	refuse = true
	mu.Unlock()
	if p.Park(cs[3], time.Now().Add(time.Hour)) || cs[3].life.State() != Idle {
		t.Fatalf("parked while refused, or changed: %s", cs[3].life.State())
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	p.Stop()
	if p.Park(cs[3], time.Now().Add(time.Hour)) || cs[3].life.State() != Idle {
		t.Fatalf("parked after Stop, or changed: %s", cs[3].life.State())
	}
}

// TestParkRegisterFails: a descriptor epoll cannot take (a regular file) does not
// park: its state is as it was, nothing is held, and the failure is reported once.
func TestParkRegisterFails(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	p := running(t, Config{Failed: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }})
	f, err := os.CreateTemp(t.TempDir(), "notasocket")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for range 2 {
		c := &testConn{fd: FD(f.Fd())}
		c.life.CompareAndSwap(New, Idle)
		if p.Park(c, time.Now().Add(time.Hour)) || c.life.State() != Idle || p.Len() != 0 {
			t.Fatalf("a regular file parked: %s, %d held", c.life.State(), p.Len())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !errors.Is(errs[0], ErrRegister) {
		t.Fatalf("reported %v, want ErrRegister once", errs)
	}
}

// TestHangUpAndTimeout: a parked connection whose client hangs up is ended at once
// (not gracefully) and one idle past its deadline gracefully, both Closing; a hang-up
// with a request before it is served instead; Stop ends what is left.
func TestHangUpAndTimeout(t *testing.T) {
	p := running(t, Config{})
	cs, clients := pairs(t, 4, Idle)
	for i, c := range cs {
		deadline := time.Now().Add(time.Hour)
		if i == 1 {
			deadline = time.Now().Add(Tick)
		}
		if !p.Park(c, deadline) {
			t.Fatal("Park refused")
		}
	}
	_ = clients[0].Close()
	endedWithin := func(c *testConn, graceful bool, what string) {
		t.Helper()
		select {
		case g := <-c.ended:
			if g != graceful || c.life.State() != Closing {
				t.Fatalf("%s: ended graceful %v in %s, want %v in closing", what, g, c.life.State(), graceful)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not ended within 10 s", what)
		}
	}
	endedWithin(cs[0], false, "hang-up")
	endedWithin(cs[1], true, "idle timeout")
	if _, err := clients[2].Write([]byte("GET")); err != nil {
		t.Fatal(err)
	}
	_ = clients[2].(*net.TCPConn).CloseWrite()
	if st := within(t, "request before the hang-up", cs[2].unparked); st != Idle {
		t.Fatalf("served as %s", st)
	}
	p.Stop()
	endedWithin(cs[3], false, "stop")
	if p.Len() != 0 {
		t.Fatalf("%d held after Stop", p.Len())
	}
}

// TestClaimAll: ClaimAll takes the connections held in one state only.
func TestClaimAll(t *testing.T) {
	p := running(t, Config{})
	whole, _ := pairs(t, 2, Idle)
	asleep, _ := pairs(t, 3, Sleeping)
	for _, c := range append(append([]*testConn{}, whole...), asleep...) {
		if !p.Park(c, time.Now().Add(time.Hour)) {
			t.Fatal("Park refused")
		}
	}
	got := p.ClaimAll(Asleep, Closing)
	if len(got) != 3 || p.Len() != 2 || p.Count(Parked) != 2 {
		t.Fatalf("claimed %d, %d left (%d parked); want 3, 2", len(got), p.Len(), p.Count(Parked))
	}
	for _, c := range asleep {
		if c.life.State() != Closing {
			t.Fatalf("an asleep connection claimed is %s", c.life.State())
		}
		c.fd.Close(false)
	}
	var none *Parker
	if none.ClaimAll(Asleep, Closing) != nil || none.Len() != 0 || none.Count(Parked) != 0 {
		t.Fatal("a nil Parker holds something")
	}
	if _, ok := none.Claim(&whole[0].life, Struck); ok {
		t.Fatal("a nil Parker gave a connection")
	}
}

// TestFDWakeAfterReset: a sleeping descriptor whose client reset the connection wakes
// into rawnet.ErrNotConnected, the descriptor closed; Close(true) resets the client.
func TestFDWakeAfterReset(t *testing.T) {
	cs, clients := pairs(t, 2, Sleeping)
	_ = clients[0].(*net.TCPConn).SetLinger(0)
	_ = clients[0].Close()
	testwait.Until(t, 5*time.Second, "the reset seen", func() bool {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(cs[0].fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return err != unix.EAGAIN
	})
	if _, err := cs[0].fd.Wake(); err == nil {
		t.Fatal("woke a reset connection")
	}
	if _, err := unix.FcntlInt(uintptr(cs[0].fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("the descriptor of a failed wake is open (%v)", err)
	}
	cs[1].fd.Close(true)
	_ = clients[1].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := clients[1].Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client of a reset close read %v, want ECONNRESET", err)
	}
}

// TestParkQueueCompacts: the timeout queue drops the entries of connections that left
// the Parker (unparked before their deadline) once they outnumber the live ones, keeps
// the live ones in park order, and waits for the oldest live deadline, not a stale one.
func TestParkQueueCompacts(t *testing.T) {
	p := newParker(Config{})
	var live []Parkee
	for i := range 3000 {
		c := &testConn{}
		p.seq++
		c.life.seq = p.seq
		e := entry{c: c, seq: p.seq, deadline: time.Hour + time.Duration(i)*time.Millisecond}
		if i%300 == 299 {
			c.life.state.Store(int32(Parked))
			live = append(live, c)
		} else {
			c.life.state.Store(int32(Idle)) // unparked since: a stale entry
		}
		p.queue = append(p.queue, e)
	}
	// One stale re-park: the connection is parked again under a newer number.
	again := p.queue[0].c.(*testConn)
	again.life.state.Store(int32(Parked))
	p.seq++
	again.life.seq = p.seq
	p.queue = append(p.queue, entry{c: again, seq: p.seq, deadline: 2 * time.Hour})
	live = append(live, again)
	p.live = len(live)

	p.mu.Lock()
	p.compact()
	p.mu.Unlock()
	if got := len(p.queue) - p.head; got != len(live) {
		t.Fatalf("%d entries after compaction, want the %d live ones", got, len(live))
	}
	for i, e := range p.queue[p.head:] {
		if e.c != live[i] || !p.valid(&e) {
			t.Fatalf("entry %d after compaction is not live connection %d in park order", i, i)
		}
	}
	ms := p.waitMillis()
	want := time.Hour + 299*time.Millisecond
	if d := time.Duration(ms) * time.Millisecond; d < want-time.Second || d > want+Tick {
		t.Fatalf("waits %s, want about %s (the oldest live deadline, rounded up to Tick)", d, want)
	}
}

// TestHandshakesMakeAWave: handshakes count into the memory release's wave like parks:
// after releaseWave of them a release is in view, due releaseQuiet after the last;
// without ReleaseIdleMemory none is.
func TestHandshakesMakeAWave(t *testing.T) {
	for _, on := range []bool{true, false} {
		p := newParker(Config{ReleaseIdleMemory: on})
		for range releaseWave - 1 {
			p.NoteHandshake()
		}
		p.mu.Lock()
		_, early := p.releaseAt()
		p.mu.Unlock()
		if early {
			t.Fatalf("a release in view after %d handshakes, want it after %d", releaseWave-1, releaseWave)
		}
		p.NoteHandshake()
		p.mu.Lock()
		at, ok := p.releaseAt()
		last := p.lastPark
		p.mu.Unlock()
		if ok != on {
			t.Fatalf("ReleaseIdleMemory %v: release in view %v after %d handshakes", on, ok, releaseWave)
		}
		if ok && at != last+releaseQuiet {
			t.Fatalf("the release is due at %s, want %s (releaseQuiet after the last handshake)", at, last+releaseQuiet)
		}
	}
	var none *Parker
	none.NoteHandshake() // nil-safe: no Parker where nothing parks
}

// TestReleaseTail: a wave's release arms one more for the parks that follow it (a wave
// its clients' pause cut in two), due releaseEvery after the first; that tail's release
// arms none.
func TestReleaseTail(t *testing.T) {
	p := newParker(Config{ReleaseIdleMemory: true})
	p.epoch = time.Now().Add(-time.Hour)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wave, p.lastPark = releaseWave, time.Since(p.epoch)-releaseQuiet
	if !p.releaseDue() || !p.tail {
		t.Fatal("a wave of releaseWave parks, quiet for releaseQuiet: no release, or no tail armed")
	}
	p.releasing = false
	if _, ok := p.releaseAt(); ok {
		t.Fatal("a release in view with no park since the last")
	}
	p.wave, p.lastPark = 3, time.Since(p.epoch)
	at, ok := p.releaseAt()
	if !ok || at != p.lastRelease+releaseEvery {
		t.Fatalf("the tail's release: in view %v at %s, want releaseEvery (%s) after the wave's at %s", ok, at, releaseEvery, p.lastRelease)
	}
	p.lastRelease -= releaseEvery // a minute on
	p.lastPark -= releaseQuiet
	if !p.releaseDue() || p.tail {
		t.Fatal("the tail's release did not come, or armed another")
	}
	p.releasing = false
	p.wave = 5
	if _, ok := p.releaseAt(); ok {
		t.Fatal("parks after a tail's release brought another into view")
	}
}

// TestRelease: a due release runs on a goroutine of Config.Go and is reported.
func TestRelease(t *testing.T) {
	done := make(chan int, 1)
	p := running(t, Config{ReleaseIdleMemory: true, Released: func(parked int, _ time.Duration) { done <- parked }})
	p.mu.Lock()
	p.lastRelease = -time.Hour
	p.mu.Unlock()
	for range releaseWave {
		p.NoteHandshake()
	}
	select {
	case n := <-done:
		if n != 0 {
			t.Fatalf("released with %d parked, want 0", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no release within 10 s of a wave")
	}
}
