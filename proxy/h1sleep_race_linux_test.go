package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
)

// Attacks on the sleeping HTTP/1.1 connections (h1sleep_linux.go): races of a strike,
// Shutdown and closeNow with sleep and wake.

// onlyFastPathConn is the one connection in s's fast path's set (the test fails when
// there is not exactly one).
func onlyFastPathConn(t *testing.T, s *Server) *tcpConn {
	t.Helper()
	var found []*tcpConn
	for i := range s.conns.shards {
		sh := &s.conns.shards[i]
		sh.mu.Lock()
		for c := range sh.m {
			found = append(found, c)
		}
		sh.mu.Unlock()
	}
	if len(found) != 1 {
		t.Fatalf("the fast path's set holds %d connections, want 1", len(found))
	}
	return found[0]
}

// TestSleeperStrikeThroughOldConn: clients.Table.Strike collects its Enders under the
// shard's lock and calls them after releasing it, so the Ender it calls may be the
// clientConn the connection had before it went to sleep (Hold.Move handed the place to
// the sleeper in between). That stale clientConn's End must still end the connection:
// here it is called once the connection sleeps, as a strike that lost that race would
// call it, and the client must see the end within strikeWithin; also when the
// connection woke and went to sleep again in between, or woke and waits awake (its
// present form another clientConn, which the old one's End reaches through their
// shared state word).
func TestSleeperStrikeThroughOldConn(t *testing.T) {
	skipUnlessParking(t)
	t.Run("asleep", func(t *testing.T) { strikeThroughOldConn(t, false, true) })
	t.Run("woken and asleep again", func(t *testing.T) { strikeThroughOldConn(t, true, true) })
	t.Run("woken", func(t *testing.T) { strikeThroughOldConn(t, true, false) })
}

func strikeThroughOldConn(t *testing.T, wakeFirst, asleep bool) {
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	rc.send(get1("/a"))
	if res, _ := rc.read("GET"); res.StatusCode != 200 {
		t.Fatalf("GET /a: %d", res.StatusCode)
	}
	// Awake for h1ParkAfter (parkCrowd is the default): take its clientConn as Strike's
	// snapshot would, then let it sleep.
	old := onlyFastPathConn(t, e.srv).cc
	waitFor(t, "the connection asleep", func() bool { return sleepers(e.srv) == 1 })
	if wakeFirst {
		// Woken and asleep again since: the strike reaches the connection's present
		// form through the old clientConn, its sleeper and the clientConn it woke into.
		parks := parkedTotal.Load()
		rc.send(get1("/b"))
		if res, _ := rc.read("GET"); res.StatusCode != 200 {
			t.Fatalf("GET /b: %d", res.StatusCode)
		}
		if asleep {
			waitFor(t, "asleep again", func() bool { return sleepers(e.srv) == 1 && parkedTotal.Load() > parks })
		} else if n := fastPathConns(e.srv); n != 1 {
			// Its client's pace (a request every h1ParkAfter) keeps it awake for twice that.
			t.Fatalf("the woken connection is not awake: %d in the fast path's set", n)
		}
	}
	old.End() // the strike that collected the clientConn before the move
	endsWithin(t, "a sleeper struck through its old clientConn", rc.c, strikeWithin)
	waitFor(t, "the struck connection given back", func() bool {
		return sleepers(e.srv) == 0 && e.openH1() == 0 && e.srv.clients.Usage(addrA).Conns == 0
	})
}

// TestSleepersStrikeRace: an address's connections are struck while they go to sleep,
// sleep, wake (their clients send requests at random moments around h1ParkSoon) and
// serve: every one of them ends within strikeWithin, its budget place is given back,
// and another address's connections, busy the same way on the same descriptors' table,
// never see an error or a wrong answer (a descriptor closed twice would end one of
// them).
func TestSleepersStrikeRace(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t, func(c *Config) { c.MaxConnsPerClient = -1 })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rounds, struck, bystanders := 6, 16, 8
	if raceEnabled {
		rounds = 4
	}
	stop := make(chan struct{})
	var bwg sync.WaitGroup
	berrs := make(chan error, bystanders)
	for i := range bystanders {
		c := dialFrom(t, addrA, e.http)
		bwg.Go(func() {
			br := bufio.NewReader(c)
			for r := 0; ; r++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				path := fmt.Sprintf("/a%d/r%d", i, r)
				if err := getEcho(c, br, path); err != nil {
					berrs <- fmt.Errorf("bystander %d: %w", i, err)
					return
				}
				time.Sleep(time.Duration(rand.N(int64(3 * h1ParkSoon))))
			}
		})
	}
	for round := range rounds {
		var wg sync.WaitGroup
		ended := make(chan time.Time, struck)
		ready := make(chan struct{}, struck)
		for i := range struck {
			c := dialFrom(t, addrB, e.http)
			wg.Go(func() {
				br := bufio.NewReader(c)
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				first := true
				for r := 0; ; r++ {
					if err := getEcho(c, br, fmt.Sprintf("/b%d/%d/r%d", round, i, r)); err != nil {
						ended <- time.Now()
						return
					}
					if first {
						ready <- struct{}{}
						first = false
					}
					time.Sleep(time.Duration(rand.N(int64(3 * h1ParkSoon))))
				}
			})
		}
		for range struck {
			<-ready
		}
		time.Sleep(time.Duration(rand.N(int64(4 * h1ParkSoon))))
		at := time.Now()
		e.srv.clients.Strike(addrB)
		wg.Wait()
		close(ended)
		for end := range ended {
			if d := end.Sub(at); d > strikeWithin {
				t.Fatalf("round %d: a struck connection ended %s after the strike", round, d)
			}
		}
		testwait.UntilWhy(t, 5*time.Second, "B's places given back", func() (bool, string) {
			u := e.srv.clients.Usage(addrB).Conns
			return u == 0, fmt.Sprintf("B holds %d", u)
		})
	}
	close(stop)
	bwg.Wait()
	close(berrs)
	for err := range berrs {
		t.Error(err)
	}
}

// getEcho sends a GET for path on c and checks the echo target's answer.
func getEcho(c net.Conn, br *bufio.Reader, path string) error {
	if _, err := io.WriteString(c, get1(path)); err != nil {
		return err
	}
	res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		return err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	if res.StatusCode != 200 || string(b) != echoed("GET", path, "") {
		return fmt.Errorf("GET %s: %d %q", path, res.StatusCode, b)
	}
	return nil
}

// TestSleepersServerEndRace: Shutdown, or closeNow, comes while connections go to
// sleep, sleep and wake (half of them send a request at a random moment around it):
// each client gets its whole answer or the end, never part of one or another's;
// Shutdown returns without waiting for its deadline, Serve returns, and nothing is left:
// no open count, no budget place, no sleeper, no descriptor.
func TestSleepersServerEndRace(t *testing.T) {
	skipUnlessParking(t)
	rounds := 4
	if raceEnabled {
		rounds = 2
	}
	for _, how := range []string{"shutdown", "close"} {
		for round := range rounds {
			t.Run(fmt.Sprintf("%s/%d", how, round), func(t *testing.T) { serverEndRace(t, how) })
		}
	}
}

func serverEndRace(t *testing.T, how string) {
	tg := echoTarget(t)
	fds := openFDs(t)
	e := sleepEnv(t, func(c *Config) { c.MaxConnsPerClient = -1 })
	e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
	const n = 32
	conns := make([]net.Conn, n)
	brs := make([]*bufio.Reader, n)
	for i := range conns {
		conns[i] = dialFrom(t, addrA, e.http)
		_ = conns[i].SetDeadline(time.Now().Add(15 * time.Second))
		brs[i] = bufio.NewReader(conns[i])
		if err := getEcho(conns[i], brs[i], fmt.Sprintf("/first/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n / 2 {
		wg.Go(func() {
			time.Sleep(time.Duration(rand.N(int64(3 * h1ParkSoon))))
			path := fmt.Sprintf("/late/%d", i)
			if _, err := io.WriteString(conns[i], get1(path)); err != nil {
				return // ended already
			}
			res, err := http.ReadResponse(brs[i], &http.Request{Method: "GET"})
			if err != nil {
				if brs[i].Buffered() > 0 {
					errs <- fmt.Errorf("connection %d: %v with %d bytes of an answer", i, err, brs[i].Buffered())
				}
				return // ended before the answer: the client may retry
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != 200 || string(b) != echoed("GET", path, "") {
				errs <- fmt.Errorf("connection %d: %d %q %v; want the echo of %s", i, res.StatusCode, b, err, path)
			}
		})
	}
	time.Sleep(time.Duration(rand.N(int64(3 * h1ParkSoon))))
	switch how {
	case "shutdown":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case "close":
		e.srv.closeNow()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, brs[i]); isTimeout(err) {
			t.Fatalf("connection %d still open after %s", i, how)
		}
		_ = c.Close()
	}
	e.waitServedWithin(t, 10*time.Second)
	testwait.UntilWhy(t, 5*time.Second, "everything given back", func() (bool, string) {
		open, sl, u, f := e.openH1(), sleepers(e.srv), e.srv.clients.Usage(addrA).Conns, openFDs(t)
		return open == 0 && sl == 0 && u == 0 && f == fds,
			fmt.Sprintf("open %d, asleep %d, budget %d, descriptors %d (%d before)", open, sl, u, f, fds)
	})
}
