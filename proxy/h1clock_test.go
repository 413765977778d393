package proxy

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestH1FastPathIdleExpiry: the fast path takes its pooled target connections by the
// pools' clock (Server.up.now, injectable), so an idle connection older than the idle
// timeout is never reused, and one younger is, without the test waiting for either.
func TestH1FastPathIdleExpiry(t *testing.T) {
	e := newEnv(t)
	tg := echoTarget(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
	var skew atomic.Int64
	e.srv.up.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }

	rc := newRawClient(t, e.http)
	get := func(want int32) {
		t.Helper()
		rc.send(get1("/"))
		if res, _ := rc.read("GET"); res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
		if n := tg.conns.Load(); n != want {
			t.Fatalf("target accepted %d connections, want %d", n, want)
		}
		// The connection goes back to its pool just after the answer was sent: the
		// clock moves only once it is there.
		waitFor(t, "the target connection idle", func() bool { return e.srv.up.Idle(tg.addr) == 1 })
	}
	get(1)
	skew.Add(int64(e.srv.up.IdleTimeout / 2))
	get(1) // younger than the idle timeout: reused
	skew.Add(int64(e.srv.up.IdleTimeout))
	get(2) // older: closed and replaced
}
