package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/proxy/internal/park"
	"golang.org/x/net/http2"
)

// Who owns a connection at each step of its life (life.go): its one state word, read by
// the tests as each step happens. A gate holds the goroutine that changes the
// connection's form (lifeHook) where the word says Sleeping or Waking, so that a strike,
// Shutdown or closeNow lands exactly there.

// lifeGate holds the first goroutine that reaches step (Sleeping or Waking) until open;
// at hands the test that connection's life.
type lifeGate struct {
	at   chan *connLife
	rel  chan struct{}
	once sync.Once
}

func gateLife(t *testing.T, step park.State) *lifeGate {
	g := &lifeGate{at: make(chan *connLife, 1), rel: make(chan struct{})}
	var first atomic.Bool
	f := func(l *connLife, st park.State) {
		if st != step || !first.CompareAndSwap(false, true) {
			return
		}
		g.at <- l
		<-g.rel
	}
	lifeHook.Store(&f)
	// Before the server's own cleanup (last registered, first run): nothing stays held.
	t.Cleanup(func() { lifeHook.Store(nil); g.open() })
	return g
}

func (g *lifeGate) open() { g.once.Do(func() { close(g.rel) }) }

// reached waits for the gated goroutine and returns its connection's life, whose word
// must say step.
func (g *lifeGate) reached(t *testing.T, step park.State) *connLife {
	t.Helper()
	select {
	case l := <-g.at:
		if st := l.State(); st != step {
			t.Fatalf("held at %s, the word says %s", step, st)
		}
		return l
	case <-time.After(15 * time.Second):
		t.Fatalf("no connection reached %s", step)
	}
	return nil
}

// lifeSteps records, for every connection, each step of lifeHook with the word's value
// then.
type lifeSteps struct {
	mu    sync.Mutex
	first *connLife
	seen  []string
}

func recordLife(t *testing.T) *lifeSteps {
	r := &lifeSteps{}
	f := func(l *connLife, st park.State) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.first == nil {
			r.first = l
		}
		if l == r.first {
			r.seen = append(r.seen, st.String()+"="+l.State().String())
		}
	}
	lifeHook.Store(&f)
	t.Cleanup(func() { lifeHook.Store(nil) })
	return r
}

// life is the first connection's life the recorder saw (nil: none yet).
func (r *lifeSteps) life() *connLife {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

func (r *lifeSteps) steps() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.seen)
}

// waitState waits until l's word says want and cond holds.
func waitState(t *testing.T, what string, l *connLife, want park.State, cond func() bool) {
	t.Helper()
	testwait.UntilWhy(t, 15*time.Second, what, func() (bool, string) {
		st := l.State()
		return st == want && (cond == nil || cond()), fmt.Sprintf("the word says %s, want %s", st, want)
	})
}

// getOK sends GET path on rc and checks the echo's answer.
func getOK(t *testing.T, rc *rawClient, path string) {
	t.Helper()
	rc.send(get1(path))
	if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", path, "") {
		t.Fatalf("GET %s: %d %q", path, res.StatusCode, body)
	}
}

// nothingLeft waits until e holds nothing of its clients: no open count, sleeper,
// budget place or parked connection.
func nothingLeft(t *testing.T, e *env) {
	t.Helper()
	testwait.UntilWhy(t, 10*time.Second, "everything given back", func() (bool, string) {
		open, sl, u, p := e.openH1(), sleepers(e.srv), e.srv.clients.Usage(addrA).Conns, parkedOn(e.srv)
		return open == 0 && sl == 0 && u == 0 && p == 0, fmt.Sprintf("open %d, asleep %d, budget %d, parked %d", open, sl, u, p)
	})
}

// resetWithin asserts that the proxy resets c's connection within d, with nothing
// before the reset but what TLS sends at a close (tls: the alert's record).
func resetWithin(t *testing.T, what string, c net.Conn, d time.Duration, tls bool) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	if len(b) > 0 && !(tls && len(b) < 64 && b[0] == 0x17) || !isReset(err) {
		t.Fatalf("%s: read %q, %v; want a reset and nothing of an answer before it", what, b, err)
	}
}

// TestLifeSleepWake: a plain connection's word through its forms: Idle while it waits
// awake, Sleeping while its goroutine puts it to sleep, Asleep in the parker (with
// nothing of its awake form alive: the sleeper and its life hold none of it), Waking
// while a goroutine rebuilds it for the next request, Idle again once that is answered,
// and Closing once its client hung up, with everything given back.
func TestLifeSleepWake(t *testing.T) {
	skipUnlessParking(t)
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	r := recordLife(t)
	rc := newRawClient(t, e.http)
	getOK(t, rc, "/a")
	h := onlyFastPathConn(t, e.srv) // awake for h1ParkAfter (parkCrowd is the default)
	l, awakeH1, awakeCC := h.life, weak.Make(h), weak.Make(h.cc)
	waitState(t, "waiting awake", l, park.Idle, nil)
	waitState(t, "asleep", l, park.Asleep, func() bool { return sleepers(e.srv) == 1 && fastPathConns(e.srv) == 0 })
	testwait.Until(t, 10*time.Second, "the awake form collected while it sleeps", func() bool {
		runtime.GC()
		return awakeH1.Value() == nil && awakeCC.Value() == nil
	})
	getOK(t, rc, "/b")
	waitState(t, "awake again", l, park.Idle, func() bool { return fastPathConns(e.srv) == 1 })
	if r.life() != l {
		t.Fatal("the woken connection has another life than the one that went to sleep")
	}
	if got, want := r.steps(), "[sleeping=sleeping waking=waking]"; got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	_ = rc.c.Close()
	waitState(t, "closed after the client's", l, park.Closing, nil)
	nothingLeft(t, e)
}

// TestLifeAsleepEnds: a sleeping connection whose client hangs up, or whose idle
// timeout ends, is Closing (the parker claimed it) and gives everything back.
func TestLifeAsleepEnds(t *testing.T) {
	skipUnlessParking(t)
	for _, how := range []string{"hang-up", "idle timeout"} {
		t.Run(how, func(t *testing.T) {
			idle := 30 * time.Second
			if how == "idle timeout" {
				idle = 3 * time.Second // above h1ParkAfter, or nothing parks
			}
			e := sleepEnv(t, func(c *Config) { c.IdleTimeout = idle })
			e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
			r := recordLife(t)
			rc := newRawClient(t, e.http)
			getOK(t, rc, "/a")
			testwait.Until(t, 15*time.Second, "a connection put to sleep", func() bool { return r.life() != nil })
			l := r.life()
			waitState(t, "asleep", l, park.Asleep, func() bool { return sleepers(e.srv) == 1 })
			if how == "hang-up" {
				_ = rc.c.Close()
			} else {
				rc.closed() // the proxy ends it
			}
			waitState(t, "ended by the parker", l, park.Closing, nil)
			nothingLeft(t, e)
		})
	}
}

// TestLifeStrikeSteps: a strike lands while the connection waits awake, is put to
// sleep, sleeps, or wakes: the word says Struck as soon as the strike returns (the
// strike won it, nobody else), and the connection ends (reset where its form was
// changing or parked), with everything given back.
func TestLifeStrikeSteps(t *testing.T) {
	skipUnlessParking(t)
	for _, at := range []park.State{park.Idle, park.Sleeping, park.Asleep, park.Waking} {
		t.Run(at.String(), func(t *testing.T) {
			var e *env
			if at == park.Idle {
				e = newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second }) // awake for h1ParkAfter
			} else {
				e = sleepEnv(t)
			}
			e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
			fds := openFDs(t)
			var g *lifeGate
			var r *lifeSteps
			switch at {
			case park.Sleeping, park.Waking:
				g = gateLife(t, at)
			case park.Asleep:
				r = recordLife(t)
			}
			rc := newRawClient(t, e.http)
			getOK(t, rc, "/a")
			var l *connLife
			switch at {
			case park.Idle:
				l = onlyFastPathConn(t, e.srv).life
				waitState(t, "waiting awake", l, park.Idle, nil)
			default:
				l = reachLife(t, e, rc, at, g, r)
			}
			if n := e.srv.clients.Strike(addrA); n != 1 {
				t.Fatalf("the strike found %d connections, want 1", n)
			}
			if st := l.State(); st != park.Struck {
				t.Fatalf("struck while %s: the word says %s", at, st)
			}
			if g != nil {
				g.open()
			}
			if at == park.Idle {
				endsWithin(t, "struck awake", rc.c, strikeWithin) // shut down both ways first: EOF, then the reset
			} else {
				resetWithin(t, "struck while "+at.String(), rc.c, strikeWithin, false)
			}
			_ = rc.c.Close()
			nothingLeft(t, e)
			if st := l.State(); st != park.Struck {
				t.Fatalf("after the end the word says %s, want struck (final)", st)
			}
			// The proxy's pooled connection to the echo target may stay (both its ends
			// are in this process).
			testwait.UntilWhy(t, 10*time.Second, "the descriptors back", func() (bool, string) {
				n := openFDs(t)
				return n <= fds+2, fmt.Sprintf("%d open, %d before", n, fds)
			})
		})
	}
}

// TestLifeServerEndSteps: Shutdown or closeNow while a connection is put to sleep,
// sleeps or wakes. Asleep, the parker's claim ends it at once. Put to sleep or waking,
// it is its goroutine's alone: the word still says so after the server's end was
// asked for, and once that goroutine goes on it ends the connection itself (the parker
// refuses parks while the server drains). Each ends Closing, Serve returns, nothing is
// left.
func TestLifeServerEndSteps(t *testing.T) {
	skipUnlessParking(t)
	for _, how := range []string{"shutdown", "close"} {
		for _, at := range []park.State{park.Sleeping, park.Asleep, park.Waking} {
			t.Run(how+"/"+at.String(), func(t *testing.T) {
				e := sleepEnv(t)
				e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
				var g *lifeGate
				var r *lifeSteps
				if at == park.Asleep {
					r = recordLife(t)
				} else {
					g = gateLife(t, at)
				}
				rc := newRawClient(t, e.http)
				getOK(t, rc, "/a")
				l := reachLife(t, e, rc, at, g, r)
				ended := make(chan error, 1)
				go func() {
					if how == "close" {
						e.srv.closeNow()
						ended <- nil
						return
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					ended <- e.srv.Shutdown(ctx)
				}()
				if g != nil {
					testwait.Until(t, 10*time.Second, "the server draining", e.srv.draining.Load)
					if st := l.State(); st != at {
						t.Fatalf("%s while %s: the word says %s before its goroutine went on", how, at, st)
					}
					g.open()
				}
				if err := <-ended; err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				rc.closed()
				waitState(t, "ended", l, park.Closing, nil)
				e.waitServedWithin(t, 10*time.Second)
				nothingLeft(t, e)
			})
		}
	}
}

// TestLifeParkedWhole: a TLS connection parks whole: Parked in the parker (it stays in
// the fast path's set), woken by its next request and parked again; a strike while it
// is parked claims it (Struck as the strike returns) and resets it; Shutdown claims it
// (Closing).
func TestLifeParkedWhole(t *testing.T) {
	skipUnlessParking(t)
	for _, how := range []string{"strike", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			e := tlsParkEnv(t)
			e.srv.parkCrowd = 0 // park after h1ParkSoon
			pc := newTLSParkClient(t, e)
			pc.get("/a")
			l := onlyFastPathConn(t, e.srv).life
			waitState(t, "parked", l, park.Parked, func() bool { return parkedOn(e.srv) == 1 })
			parks := parkedTotal.Load()
			pc.get("/b")
			waitState(t, "parked again", l, park.Parked, func() bool { return parkedOn(e.srv) == 1 && parkedTotal.Load() > parks })
			switch how {
			case "strike":
				if n := e.srv.clients.Strike(addrA); n != 1 {
					t.Fatalf("the strike found %d connections, want 1", n)
				}
				if st := l.State(); st != park.Struck {
					t.Fatalf("struck while parked: the word says %s", st)
				}
				resetWithin(t, "struck while parked", pc.raw, strikeWithin, true)
			case "shutdown":
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := e.srv.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				if st := l.State(); st != park.Closing {
					t.Fatalf("after Shutdown the word says %s, want closing", st)
				}
				pc.closedByProxy()
			}
			nothingLeft(t, e)
		})
	}
}

// TestLifeH2Parked: an HTTP/2 connection's word says Active while its engine serves it
// (with or without streams) and Parked once it parked; a strike either way wins it
// (Struck as the strike returns) and its engine, resumed if it was parked, says GOAWAY
// ENHANCE_YOUR_CALM before the end.
func TestLifeH2Parked(t *testing.T) {
	skipUnlessParking(t)
	for _, useTLS := range []bool{false, true} {
		for _, at := range []park.State{park.Active, park.Parked} {
			t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS]+"/"+at.String(), func(t *testing.T) {
				e := parkEnv(t)
				p := dialH2Peer(t, e, useTLS, "life")
				p.check(p.get("/a"), "/a")
				l := onlyFastPathConn(t, e.srv).life // awake for h1ParkAfter (parkCrowd is the default)
				if st := l.State(); st != park.Active {
					t.Fatalf("served by its engine: the word says %s, want active", st)
				}
				if at == park.Parked {
					waitState(t, "parked", l, park.Parked, func() bool { return parkedOn(e.srv) == 1 })
				}
				if n := e.srv.clients.Strike(addrA); n != 1 {
					t.Fatalf("the strike found %d connections, want 1", n)
				}
				if st := l.State(); st != park.Struck {
					t.Fatalf("struck while %s: the word says %s", at, st)
				}
				_ = p.nc.SetReadDeadline(time.Now().Add(strikeWithin))
				ev, err := p.readUntil(func(f http2.Frame, ev *h2Event) bool {
					ga, ok := f.(*http2.GoAwayFrame)
					ev.goaway = ga
					return ok
				})
				if err != nil || ev.goaway.ErrCode != http2.ErrCodeEnhanceYourCalm {
					t.Fatalf("after the strike: %+v, %v; want GOAWAY ENHANCE_YOUR_CALM", ev.goaway, err)
				}
				endsWithin(t, "struck while "+at.String(), p.nc, strikeWithin)
				testwait.UntilWhy(t, 10*time.Second, "everything given back", func() (bool, string) {
					open, u, n := e.openH2(), e.srv.clients.Usage(addrA).Conns, parkedOn(e.srv)
					return open == 0 && u == 0 && n == 0, fmt.Sprintf("open %d, budget %d, parked %d", open, u, n)
				})
			})
		}
	}
}

// reachLife brings rc's connection, which has had one answer, to at (sleeping or
// waking: held there by g; asleep: seen by r) and returns its life.
func reachLife(t *testing.T, e *env, rc *rawClient, at park.State, g *lifeGate, r *lifeSteps) *connLife {
	t.Helper()
	switch at {
	case park.Asleep:
		testwait.Until(t, 15*time.Second, "a connection put to sleep", func() bool { return r.life() != nil })
		l := r.life()
		waitState(t, "asleep", l, park.Asleep, func() bool { return sleepers(e.srv) == 1 })
		return l
	case park.Waking:
		testwait.Until(t, 15*time.Second, "a sleeper", func() bool { return sleepers(e.srv) == 1 })
		rc.send(get1("/b"))
	}
	return g.reached(t, at)
}
