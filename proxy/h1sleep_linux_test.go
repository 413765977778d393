package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/proxy/internal/park"
)

// sleepers is how many parked connections s holds in their compact form (h1sleep_linux.go).
func sleepers(s *Server) int { return s.parker.Count(park.Asleep) }

// fastPathConns is how many connections the fast path's set holds.
func fastPathConns(s *Server) int {
	return s.conns.count()
}

// TestSleeperCompact: a parked plain HTTP/1.1 connection is held as a sleeper: not in
// the fast path's set, with Go's own descriptor closed (the process holds one for the
// connection, the sleeper's, as before it parked), its place in the address's budget
// and its count kept; the next request wakes it, is answered on the same connection
// and counted under its hostname with exact bytes, and it sleeps again; the client's
// close gives everything back.
func TestSleeperCompact(t *testing.T) {
	skipUnlessParking(t)
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	e.srv.parkCrowd = 0 // park after h1ParkSoon

	rc := newRawClient(t, e.http)
	cr := &byteCounter{r: rc.c}
	rc.br = bufio.NewReader(cr)
	var in int64
	request := func(path string) {
		t.Helper()
		req := get1(path)
		rc.send(req)
		res, body := rc.read("GET")
		if res.StatusCode != 200 || body != echoed("GET", path, "") {
			t.Fatalf("GET %s: %d %q", path, res.StatusCode, body)
		}
		in += int64(len(req))
	}
	request("/first")
	waitFor(t, "the connection asleep", func() bool { return sleepers(e.srv) == 1 })
	asleep := openFDs(t)
	if n := fastPathConns(e.srv); n != 0 {
		t.Fatalf("the fast path's set holds %d connections with the only one asleep", n)
	}
	if u := e.srv.clients.Usage(addrA); u.Conns != 1 {
		t.Fatalf("asleep, the address holds %d connections in its budget, want 1", u.Conns)
	}
	if n := e.openH1(); n != 1 {
		t.Fatalf("asleep, %d HTTP/1.1 connections counted open, want 1", n)
	}
	for i := range 3 {
		request(fmt.Sprintf("/woken/%d", i))
		waitFor(t, "asleep again", func() bool { return sleepers(e.srv) == 1 })
		if fds := openFDs(t); fds != asleep {
			t.Fatalf("asleep after wake %d: %d descriptors open, %d the first time", i, fds, asleep)
		}
	}
	if u := e.srv.clients.Usage(addrA); u.Conns != 1 {
		t.Fatalf("after waking, the address holds %d connections, want 1", u.Conns)
	}
	st := e.stat(h1Host)
	if out := cr.n; st.Requests != 4 || int64(st.BytesIn) != in || int64(st.BytesOut) != out || st.Connections != 1 {
		t.Fatalf("host stats %+v; want 4 requests, %d bytes in, %d out, 1 connection", st, in, out)
	}
	_ = rc.c.Close()
	waitFor(t, "the closed connection given back", func() bool {
		return sleepers(e.srv) == 0 && e.openH1() == 0 && e.srv.clients.Usage(addrA).Conns == 0 && openFDs(t) == asleep-2
	})
}

// TestCrowdParksSoon: with more goroutines than Server.parkCrowd, an idle connection
// parks after h1ParkSoon, not h1ParkAfter; a connection that is busy more often than
// that never parks.
func TestCrowdParksSoon(t *testing.T) {
	skipUnlessParking(t)
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	e.srv.parkCrowd = 0
	rc := newRawClient(t, e.http)
	rc.send(get1("/a"))
	rc.read("GET")
	start := time.Now()
	waitFor(t, "parked", func() bool { return parkedOn(e.srv) == 1 })
	if d := time.Since(start); d >= h1ParkAfter {
		t.Fatalf("parked after %s in a crowd, want about %s (h1ParkSoon)", d, h1ParkSoon)
	}
	// Busy: a request every h1ParkSoon/5 keeps the connection awake.
	parks := parkedTotal.Load()
	for i := range 20 {
		rc.send(get1(fmt.Sprintf("/busy/%d", i)))
		if res, _ := rc.read("GET"); res.StatusCode != 200 {
			t.Fatalf("busy request %d: %d", i, res.StatusCode)
		}
		time.Sleep(h1ParkSoon / 5) // the client's pace, not a wait for the proxy
	}
	if p := parkedTotal.Load() - parks; p > 2 {
		t.Fatalf("a connection busy every %s parked %d times in 20 requests", h1ParkSoon/5, p)
	}
}

// TestSleepersChurn: many connections whose clients pause around h1ParkSoon, so that
// they sleep and wake at every turn, while some are struck for abuse and some close:
// every answer is the right one on the right connection, and once the clients are
// gone nothing is left: no count, no budget, no descriptor, no sleeper.
func TestSleepersChurn(t *testing.T) {
	skipUnlessParking(t)
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second; c.MaxConnsPerClient = -1 })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	e.srv.parkCrowd = 0
	fds := openFDs(t)
	const conns, rounds = 40, 12
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		from := addrA
		if i%4 == 0 {
			from = addrB // B is struck below
		}
		c := dialFrom(t, from, e.http)
		wg.Go(func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(c)
			for r := range rounds {
				path := fmt.Sprintf("/c%d/r%d", i, r)
				if _, err := io.WriteString(c, get1(path)); err != nil {
					if from == addrB {
						return // struck
					}
					errs <- fmt.Errorf("conn %d round %d: %w", i, r, err)
					return
				}
				res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
				if err != nil {
					if from == addrB {
						return
					}
					errs <- fmt.Errorf("conn %d round %d: %w", i, r, err)
					return
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || string(b) != echoed("GET", path, "") {
					errs <- fmt.Errorf("conn %d round %d: %q %v; want the echo of %s", i, r, b, err, path)
					return
				}
				// Around h1ParkSoon: some rounds find the connection awake, some asleep,
				// some waking.
				time.Sleep(time.Duration(rand.N(int64(3 * h1ParkSoon))))
			}
		})
	}
	// Strike B a few times while its connections sleep and wake.
	for range 3 {
		time.Sleep(2 * h1ParkSoon)
		e.srv.clients.Strike(addrB)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	testwait.UntilWhy(t, 5*time.Second, "everything given back", func() (bool, string) {
		e.srv.up.CloseIdle() // the pooled upstream connections hold descriptors too
		open, sl, pk := e.openH1(), sleepers(e.srv), parkedOn(e.srv)
		ua, ub, n := e.srv.clients.Usage(addrA).Conns, e.srv.clients.Usage(addrB).Conns, openFDs(t)
		return open == 0 && sl == 0 && pk == 0 && ua == 0 && ub == 0 && n == fds,
			fmt.Sprintf("open %d, asleep %d, parked %d, budgets A %d B %d, descriptors %d (%d before)", open, sl, pk, ua, ub, n, fds)
	})
}

// TestSleepersEndWithServer: closing the server (its context cancelled: closeNow) ends
// sleeping connections at once (the client sees the end), and so does Shutdown's drain
// for those that sleep when it starts.
func TestSleepersEndWithServer(t *testing.T) {
	skipUnlessParking(t)
	for _, how := range []string{"shutdown", "close"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
			e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
			e.srv.parkCrowd = 0
			const n = 8
			rcs := make([]*rawClient, n)
			for i := range rcs {
				rcs[i] = newRawClient(t, e.http)
				rcs[i].send(get1("/x"))
				rcs[i].read("GET")
			}
			waitFor(t, "all asleep", func() bool { return sleepers(e.srv) == n })
			switch how {
			case "shutdown":
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := e.srv.Shutdown(ctx); err != nil {
					t.Fatalf("Shutdown: %v", err)
				}
			case "close":
				e.srv.closeNow()
			}
			for i, rc := range rcs {
				_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := rc.br.ReadByte(); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
					t.Fatalf("sleeping connection %d after %s: %v; want its end", i, how, err)
				}
			}
			waitFor(t, "counted closed", func() bool { return e.openH1() == 0 && sleepers(e.srv) == 0 })
		})
	}
}

// TestSleepersWakeAll: 2,000 sleeping connections (500 under the race detector) woken
// at once each get the answer to their own request; a sleeper sent half a head wakes and
// waits for the rest, one sent two pipelined requests in one segment answers both in
// order; all sleep again, hold no goroutine, and leave no descriptor once closed.
func TestSleepersWakeAll(t *testing.T) {
	skipUnlessParking(t)
	n := 2000
	if raceEnabled {
		n = 500
	}
	e := newEnv(t, func(c *Config) {
		c.IdleTimeout = 30 * time.Second
		c.MaxConnsPerClient = -1
		c.MaxRequestsPerClient = -1                // every woken request is in flight at once, from one address
		c.ResponseHeaderTimeout = 30 * time.Second // every woken request reaches the target at once
	})
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	e.srv.parkCrowd = 0
	fds := openFDs(t)
	clients := make([]*rawClient, n)
	for i := range clients {
		clients[i] = newRawClient(t, e.http)
		_ = clients[i].c.SetDeadline(time.Now().Add(60 * time.Second))
		clients[i].send(get1(fmt.Sprintf("/first/%d", i)))
	}
	for i, rc := range clients {
		if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", fmt.Sprintf("/first/%d", i), "") {
			t.Fatalf("connection %d: %d %q", i, res.StatusCode, body)
		}
	}
	waitUntil := func(what string, cond func() bool) { t.Helper(); testwait.Until(t, 30*time.Second, what, cond) }
	waitUntil("every connection asleep", func() bool { return sleepers(e.srv) == n })
	if g := h1Goroutines(); g != 0 {
		t.Fatalf("%d goroutines serve connections with all %d asleep", g, n)
	}

	// Half a head, to a sleeper.
	half := clients[0]
	head := get1("/half")
	half.send(head[:len(head)/2])
	// Two requests in one segment, to another.
	two := clients[1]
	two.send(get1("/one") + get1("/two"))
	for _, p := range []string{"/one", "/two"} {
		if res, body := two.read("GET"); res.StatusCode != 200 || body != echoed("GET", p, "") {
			t.Fatalf("pipelined %s to a sleeper: %d %q", p, res.StatusCode, body)
		}
	}
	half.send(head[len(head)/2:])
	if res, body := half.read("GET"); res.StatusCode != 200 || body != echoed("GET", "/half", "") {
		t.Fatalf("a head sent in two halves to a sleeper: %d %q", res.StatusCode, body)
	}

	// Everyone at once.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i, rc := range clients {
		wg.Go(func() {
			<-start
			path := fmt.Sprintf("/wake/%d", i)
			if _, err := io.WriteString(rc.c, get1(path)); err != nil {
				errs <- err
				return
			}
			res, err := http.ReadResponse(rc.br, &http.Request{Method: "GET"})
			if err != nil {
				errs <- fmt.Errorf("connection %d: %w", i, err)
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || string(b) != echoed("GET", path, "") {
				errs <- fmt.Errorf("connection %d: %q %v; want the echo of %s", i, b, err, path)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitUntil("every connection asleep again", func() bool { return sleepers(e.srv) == n })
	for _, rc := range clients {
		_ = rc.c.Close()
	}
	waitUntil("every connection closed", func() bool {
		e.srv.up.CloseIdle()
		return e.openH1() == 0 && sleepers(e.srv) == 0 && openFDs(t) == fds
	})
}
