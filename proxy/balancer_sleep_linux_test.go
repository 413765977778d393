package proxy

import (
	"bufio"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestBalancerSleeperKeepsItsClient: a balancer's plain connection that goes to sleep
// (h1sleep_linux.go) and wakes keeps its header's client: X-Forwarded-For names it
// after every wake, its place stays in its client's budget while it sleeps (none in the
// balancer's), a strike of its client ends it asleep, and the balancer's own (LOCAL)
// sleeping connection is in no budget and unmoved by any strike.
func TestBalancerSleeperKeepsItsClient(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t, func(c *Config) { c.ProxyProtocolFrom = []netip.Prefix{netip.PrefixFrom(lbAddr, 32)} })
	e.apply([]routeSpec{{host: h1Host, backends: []string{backend(t, echoInfo())}}})
	for _, tc := range []struct {
		src  netip.AddrPort
		want string
	}{{cliX, cliX.Addr().String()}, {cliV6, cliV6.Addr().String()}, {netip.AddrPort{}, lbAddr.String()}} {
		c := lbDial(t, e.http, ppHeader(t, 2, tc.src))
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		br := bufio.NewReader(c)
		parks := parkedTotal.Load()
		if got := getFrom(t, c, br, "/before"); got != tc.want {
			t.Fatalf("%v, awake: X-Forwarded-For %q, want %q", tc.src, got, tc.want)
		}
		for i := range 2 {
			asleepAgain(t, e, 1, parks)
			parks = parkedTotal.Load()
			if got := getFrom(t, c, br, fmt.Sprintf("/woken/%d", i)); got != tc.want {
				t.Fatalf("%v, after wake %d: X-Forwarded-For %q, want %q", tc.src, i, got, tc.want)
			}
		}
		asleepAgain(t, e, 1, parks)
		if u := e.srv.clients.Usage(lbAddr); u.Conns != 0 {
			t.Fatalf("asleep, the balancer counts %d connections", u.Conns)
		}
		if !tc.src.IsValid() {
			if n := e.srv.clients.Strike(lbAddr); n != 0 {
				t.Fatalf("a strike of the balancer's address reached %d connections", n)
			}
			if got := getFrom(t, c, br, "/after-strike"); got != tc.want {
				t.Fatalf("LOCAL after a strike: X-Forwarded-For %q", got)
			}
			_ = c.Close()
			waitFor(t, "closed", func() bool { return sleepers(e.srv) == 0 && e.openH1() == 0 })
			continue
		}
		if u := e.srv.clients.Usage(tc.src.Addr()); u.Conns != 1 {
			t.Fatalf("asleep, %v counts %d connections, want 1", tc.src, u.Conns)
		}
		if n := e.srv.clients.Strike(tc.src.Addr()); n != 1 {
			t.Fatalf("a strike of %v reached %d connections, want its sleeping one", tc.src, n)
		}
		waitFor(t, "the struck sleeper ended and given back", func() bool {
			return sleepers(e.srv) == 0 && e.openH1() == 0 && e.srv.clients.Usage(tc.src.Addr()).Conns == 0
		})
	}
}
