package reliability

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
)

// TestIdleTunnelsClosed: issue 25 finding 3 against the binary. 1,000 silent WebSockets
// from one client are closed once --tunnel-idle-timeout (2 s here) passed without a byte,
// each counted in ingress_tunnels_closed_idle_total, and their clients see the close;
// one that exchanges a message every 600 ms stays open through it; and the per-address
// tunnel budget refuses the one beyond them (503).
func TestIdleTunnelsClosed(t *testing.T) {
	const idle, timeout = 1000, 2 * time.Second
	if lim := noFileLimit(t); lim < 3*idle+500 {
		t.Fatalf("the descriptor limit is %d; this test needs %d", lim, 3*idle+500)
	}
	const host = "ws.rel.test"
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, wsEchoBackend(t))),
		"--tunnel-idle-timeout", timeout.String(),
		// All from 127.0.0.1: the tunnel budget is exactly what this test opens (the
		// echoing one and the idle ones), the connection budget is lifted.
		"--max-tunnels-per-client", fmt.Sprint(idle+1), "--max-conns-per-client", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	dial := func() *websocket.Conn {
		c, _, err := websocket.Dial(ctx, "ws://"+p.HTTP+"/ws", &websocket.DialOptions{Host: host})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c
	}
	active := dial()
	start := time.Now()
	conns := make([]*websocket.Conn, idle)
	for i := range conns {
		conns[i] = dial()
	}
	opened := time.Since(start)
	// One more than the per-address tunnel budget is refused before any target sees it.
	if _, res, err := websocket.Dial(ctx, "ws://"+p.HTTP+"/ws", &websocket.DialOptions{Host: host}); err == nil || res == nil ||
		res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("the WebSocket beyond --max-tunnels-per-client: %v %v; want 503 with Retry-After: 1", res, err)
	}

	// Every idle client sees its tunnel end.
	var wg sync.WaitGroup
	ended := make(chan time.Duration, idle)
	for _, c := range conns {
		wg.Go(func() {
			if _, _, err := c.Read(ctx); err != nil {
				ended <- time.Since(start)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(timeout * 3 / 10)
	defer tick.Stop()
	for n := 0; ; n++ {
		msg := fmt.Sprintf("message %d", n)
		if err := active.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("the active tunnel failed after %s: %v", time.Since(start), err)
		}
		if _, b, err := active.Read(ctx); err != nil || string(b) != msg {
			t.Fatalf("the active tunnel's echo %d after %s: %q %v", n, time.Since(start), b, err)
		}
		select {
		case <-done:
		case <-tick.C:
			continue
		}
		break
	}
	close(ended)
	first, last, n := time.Duration(1<<62), time.Duration(0), 0
	for d := range ended {
		first, last, n = min(first, d), max(last, d), n+1
	}
	if n != idle {
		t.Fatalf("%d of %d idle tunnels ended", n, idle)
	}
	if first < timeout {
		t.Errorf("an idle tunnel ended %s after the first was opened, before the timeout %s", first, timeout)
	}
	testwait.UntilWhy(t, waitLimit, "the idle closes counted", func() (bool, string) {
		m := scrape(t, p.Admin)
		return m.get("ingress_tunnels_closed_idle_total") == idle && m.get("ingress_open_websockets") == 1,
			fmt.Sprintf("%v closed idle, %v open", m.get("ingress_tunnels_closed_idle_total"), m.get("ingress_open_websockets"))
	})
	t.Logf("%d tunnels opened in %s, ended %s to %s after the first opened (timeout %s)", idle, opened, first, last, timeout)
}
