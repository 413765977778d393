package proxy

import (
	"testing"
	"time"
)

// Attacks on the sleeping HTTP/1.1 connections (h1sleep_linux.go): races of a strike,
// Shutdown and closeNow with sleep and wake.

// onlyFastPathConn is the one connection in s's fast path's set (the test fails when
// there is not exactly one).
func onlyFastPathConn(t *testing.T, s *Server) *h1Conn {
	t.Helper()
	s.h1.mu.Lock()
	defer s.h1.mu.Unlock()
	if len(s.h1.m) != 1 {
		t.Fatalf("the fast path's set holds %d connections, want 1", len(s.h1.m))
	}
	for c := range s.h1.m {
		return c
	}
	return nil
}

// TestSleeperStrikeThroughOldConn: clients.Table.Strike collects its Enders under the
// shard's lock and calls them after releasing it, so the Ender it calls may be the
// clientConn the connection had before it went to sleep (Hold.Move handed the place to
// the sleeper in between). That stale clientConn's End must still end the connection:
// here it is called once the connection sleeps, as a strike that lost that race would
// call it, and the client must see the end within strikeWithin.
func TestSleeperStrikeThroughOldConn(t *testing.T) {
	skipUnlessParking(t)
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
	old.End() // the strike that collected the clientConn before the move
	endsWithin(t, "a sleeper struck through its old clientConn", rc.c, strikeWithin)
	waitFor(t, "the struck connection given back", func() bool {
		return sleepers(e.srv) == 0 && e.openH1() == 0 && e.srv.clients.Usage(addrA).Conns == 0
	})
}
