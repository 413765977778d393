package proxy

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// wsTunnel is one WebSocket through the ingress, spoken as frames: send writes one text
// frame, read reads one (an error once the tunnel ended).
type wsTunnel struct {
	name string
	send func(msg string) error
	read func() (string, error)
}

// openTunnels opens one WebSocket to host over HTTP/1.1, HTTP/2 (extended CONNECT) and
// HTTP/3 (RFC 9220) through e.
func openTunnels(t *testing.T, e *env, host string) []wsTunnel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, "ws://"+e.http+"/ws", &websocket.DialOptions{Host: host, HTTPClient: e.h1Client()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	h1 := wsTunnel{name: "HTTP/1.1",
		send: func(m string) error { return c.Write(ctx, websocket.MessageText, []byte(m)) },
		read: func() (string, error) { _, b, err := c.Read(ctx); return string(b), err }}

	res, w := extendedConnect(t, e.http, host, "/ws", "websocket", "sec-websocket-version", "13")
	if res.StatusCode != 200 {
		t.Fatalf("HTTP/2 extended CONNECT answered %d", res.StatusCode)
	}
	h2 := wsTunnel{name: "HTTP/2",
		send: func(m string) error { return wsFrame(w, 1, []byte(m)) },
		read: func() (string, error) { _, b, err := wsRead(res.Body); return string(b), err }}

	str := h3WebSocket(t, e, host)
	h3 := wsTunnel{name: "HTTP/3",
		send: func(m string) error { return wsFrame(str, 1, []byte(m)) },
		read: func() (string, error) { _, b, err := wsRead(str); return string(b), err }}
	return []wsTunnel{h1, h2, h3}
}

// TestTunnelsClosedWhenIdle: with TunnelIdleTimeout set, a WebSocket with no byte either
// way is closed once the timeout passed (never before it), on HTTP/1.1, HTTP/2 and
// HTTP/3, and counted; one whose client sends every timeout/3 stays open well past it.
func TestTunnelsClosedWhenIdle(t *testing.T) {
	const timeout = time.Second
	e := newEnv(t, withHTTP3, func(c *Config) { c.TunnelIdleTimeout = timeout })
	const host = "ws.example.test"
	e.apply([]routeSpec{{host: host, tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{wsEcho(t)}}},
		certSpec{"c1", []string{host}})

	opened := time.Now() // before any of them: a close is never measured early
	idle := openTunnels(t, e, host)
	active := openTunnels(t, e, host)

	// The idle ones: each read returns once the ingress closed the tunnel.
	var wg sync.WaitGroup
	closedAfter := make([]time.Duration, len(idle))
	for i, tn := range idle {
		wg.Go(func() {
			if m, err := tn.read(); err == nil {
				t.Errorf("%s: an idle tunnel delivered %q", tn.name, m)
				return
			}
			closedAfter[i] = time.Since(opened)
		})
	}
	// The active ones echo a message every timeout/3 until the idle ones are closed and
	// three timeouts have passed.
	idleDone := make(chan struct{})
	go func() { wg.Wait(); close(idleDone) }()
	tick := time.NewTicker(timeout / 3)
	defer tick.Stop()
	for n := 0; ; n++ {
		for _, tn := range active {
			msg := fmt.Sprintf("%s %d", tn.name, n)
			if err := tn.send(msg); err != nil {
				t.Fatalf("%s: active tunnel send %d after %s: %v", tn.name, n, time.Since(opened), err)
			}
			if got, err := tn.read(); err != nil || got != msg {
				t.Fatalf("%s: active tunnel echo %d after %s: %q %v", tn.name, n, time.Since(opened), got, err)
			}
		}
		select {
		case <-idleDone:
			if time.Since(opened) > 3*timeout {
				goto done
			}
		default:
		}
		<-tick.C
	}
done:
	for i, tn := range idle {
		if closedAfter[i] < timeout {
			t.Errorf("%s: the idle tunnel was closed after %s, before the timeout %s", tn.name, closedAfter[i], timeout)
		}
	}
	if got := e.totals.Snapshot().TunnelsClosedIdle; got != uint64(len(idle)) {
		t.Errorf("TunnelsClosedIdle = %d, want %d (the idle tunnels only)", got, len(idle))
	}
	if got := e.totals.Snapshot().WebSockets; got != int64(len(active)) {
		t.Errorf("%d tunnels open, want the %d active ones", got, len(active))
	}
}

// TestPipeStampCostsNoAllocation: the activity stamp the copy loop sets per chunk is one
// atomic store: pipe allocates nothing per chunk.
func TestPipeStampCostsNoAllocation(t *testing.T) {
	e := newEnv(t)
	tn := &tunnel{}
	src := strings.NewReader("")
	chunk := strings.Repeat("x", 512)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(chunk)
		if _, err := e.srv.pipe(io.Discard, src, nil, stats.ProtoHTTP1, true, tn); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("pipe allocated %.1f times per run, want 0", allocs)
	}
	if tn.last.Load() == 0 {
		t.Fatal("pipe did not stamp the tunnel's activity")
	}
}
