package reliability

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// wsEchoBackend is a WebSocket target that echoes every message.
func wsEchoBackend(t *testing.T) routetable.Target {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if c.Write(r.Context(), typ, b) != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return binarytest.TargetOf(t, srv.Listener.Addr().String(), "lease-ws")
}

// TestSwapsUnderLoad: route tables swapped every 50 ms (targets of the loaded route
// changing, other routes coming and going) while a load generator runs and HTTP/1.1
// WebSockets exchange messages: no request fails and no WebSocket drops. 10 s, or 30 s
// with -reliability.long.
func TestSwapsUnderLoad(t *testing.T) {
	t.Parallel()
	duration := 10 * time.Second
	if *long {
		duration = 30 * time.Second
	}
	const host, wsHost = "swapped.rel.test", "ws.rel.test"
	b1, b2 := echoBackend(t, "one"), echoBackend(t, "two")
	ws := wsEchoBackend(t)
	targetSets := [][]routetable.Target{{b1}, {b1, b2}, {b2}}
	table := func(rev int64) []byte {
		routes := []routetable.Route{binarytest.Route(host, "", false, targetSets[rev%3]...), binarytest.Route(wsHost, "", false, ws)}
		for i := range rev % 5 {
			routes = append(routes, binarytest.Route(fmt.Sprintf("extra%d.rel.test", i), "", false, b1))
		}
		return binarytest.TableJSON(t, rev, nil, routes...)
	}
	rs, origin := startRelay(t)
	rs.SetTable(table(1), 1)
	p := start(t, binarytest.RelayEnv(testBearer, origin, testNode), binarytest.BaseArgs()...)
	waitReady(t, p)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	l := runLoad(ctx, t, p.HTTP, host, 4)

	const sockets = 20
	var (
		wsWG      sync.WaitGroup
		exchanged atomic.Int64
		wsErrs    = make(chan error, sockets)
	)
	for i := range sockets {
		dctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		c, _, err := websocket.Dial(dctx, "ws://"+p.HTTP+"/ws", &websocket.DialOptions{Host: wsHost})
		cancel()
		if err != nil {
			t.Fatalf("WebSocket %d: %v", i, err)
		}
		wsWG.Add(1)
		go func() {
			defer wsWG.Done()
			defer c.CloseNow()
			for n := 0; ; n++ {
				msg := fmt.Sprintf("socket %d message %d", i, n)
				wctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				err := c.Write(wctx, websocket.MessageText, []byte(msg))
				var got []byte
				if err == nil {
					_, got, err = c.Read(wctx)
				}
				cancel()
				if err == nil && string(got) != msg {
					err = fmt.Errorf("echo %q, want %q", got, msg)
				}
				if err != nil {
					wsErrs <- fmt.Errorf("WebSocket %d after %d messages: %w", i, n, err)
					return
				}
				exchanged.Add(1)
				select {
				case <-ctx.Done():
					_ = c.Close(websocket.StatusNormalClosure, "")
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}

	applies0 := scrape(t, p.Admin).get("ingress_route_table_applies_total")
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	end := time.After(duration)
	rev := int64(1)
swapping:
	for {
		select {
		case <-end:
			break swapping
		case <-tick.C:
		}
		rev++
		rs.SetTable(table(rev), rev)
		if err := rs.PushHint(ctxFor(t, waitLimit), rev); err != nil {
			t.Fatalf("hint %d: %v", rev, err)
		}
	}
	testwait.UntilWhy(t, waitLimit, "the last table applied", func() (bool, string) {
		got := scrape(t, p.Admin).get("ingress_route_table_revision")
		return got == float64(rev), fmt.Sprintf("revision %v, want %d", got, rev)
	})
	stop()
	wsWG.Wait()
	close(wsErrs)
	for err := range wsErrs {
		t.Error(err)
	}
	n, failed := l.wait()
	applies := scrape(t, p.Admin).get("ingress_route_table_applies_total") - applies0
	t.Logf("%d swaps in %s (%v applied), %d requests (%d failed), %d WebSocket round trips on %d sockets",
		rev-1, duration, applies, n, failed, exchanged.Load(), sockets)
	if failed > 0 || n == 0 {
		t.Fatalf("%d of %d requests failed during the swaps: %v", failed, n, l.firstErr())
	}
	if applies < float64(rev-1)/2 {
		t.Fatalf("only %v of %d tables applied: the swaps did not happen", applies, rev-1)
	}
}
