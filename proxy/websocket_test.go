package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func wsEcho(t testing.TB) string {
	return backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			if err := c.Write(r.Context(), typ, b); err != nil {
				return
			}
		}
	}))
}

func TestWebSocketEchoSurvivesSwaps(t *testing.T) {
	e := newEnv(t)
	be := wsEcho(t)
	other := backend(t, echoInfo())
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{be}}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, "ws://"+e.http+"/ws", &websocket.DialOptions{Host: "ws.example.test", HTTPClient: e.h1Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if res.StatusCode != 101 {
		t.Fatalf("status %d", res.StatusCode)
	}
	echo := func(i int) {
		t.Helper()
		msg := fmt.Sprintf("message %d", i)
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		_, b, err := c.Read(ctx)
		if err != nil || string(b) != msg {
			t.Fatalf("read %d: %q %v", i, b, err)
		}
	}
	echo(0)
	for i := 1; i <= 5; i++ {
		routes := []routeSpec{{host: "ws.example.test", backends: []string{be}}, {host: fmt.Sprintf("r%d.example.test", i), backends: []string{other}}}
		if i == 3 {
			routes = routes[1:] // the tunnel's target (and route) disappear
		}
		e.apply(routes)
		echo(i)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close: %v", err)
	}
	waitFor(t, "tunnel bytes", func() bool {
		st := e.stat("ws.example.test")
		return st.Requests == 1 && st.BytesIn > 6*10 && st.BytesOut > 6*10
	})
}

func TestWebSocketHandshakeFailures(t *testing.T) {
	e := newEnv(t)
	refuse := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusForbidden) }))
	broken := rawServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c)) // then closes: breaks the handshake without an answer
	})
	e.apply([]routeSpec{
		{host: "refuse.example.test", backends: []string{refuse}},
		{host: "broken.example.test", backends: []string{broken}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, res, err := websocket.Dial(ctx, "ws://"+e.http+"/", &websocket.DialOptions{Host: "refuse.example.test", HTTPClient: e.h1Client()})
	if err == nil || res == nil || res.StatusCode != 403 {
		t.Fatalf("refused upgrade: %v %v", res, err)
	}
	_, res, err = websocket.Dial(ctx, "ws://"+e.http+"/", &websocket.DialOptions{Host: "broken.example.test", HTTPClient: e.h1Client()})
	if err == nil || res == nil || res.StatusCode != 502 {
		t.Fatalf("broken upgrade: %v %v", res, err)
	}
	if st := e.stat("broken.example.test"); st.BackendFailures.Handshake != 1 || st.BackendFailures.Request != 0 {
		t.Errorf("broken: %+v", st.BackendFailures)
	}
	if st := e.stat("refuse.example.test"); st.BackendFailures.Handshake != 0 {
		t.Errorf("an answered refusal is no failure: %+v", st.BackendFailures)
	}
}

// TestWebSocketClientGoneDuringHandshake: a client that half-closes its connection while
// the target has not answered the upgrade yet is given nothing, not net/http's default
// 200 for a handler that wrote nothing (the plain forward already refused that), and the
// target's connection is closed.
func TestWebSocketClientGoneDuringHandshake(t *testing.T) {
	e := newEnv(t)
	asked, targetDone := make(chan struct{}), make(chan struct{})
	var askedOnce, doneOnce sync.Once
	silent := rawServer(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		askedOnce.Do(func() { close(asked) })
		_, _ = io.Copy(io.Discard, c) // never answers; returns when the proxy closes
		doneOnce.Do(func() { close(targetDone) })
	})
	e.apply([]routeSpec{{host: "silent.example.test", backends: []string{silent}}})
	c := dialRaw(t, e.http)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: silent.example.test\r\nConnection: Upgrade\r\n"+
		"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the upgrade never reached the target")
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if len(got) != 0 {
		t.Fatalf("a client that left during the handshake got %q (err %v); want nothing", got, err)
	}
	select {
	case <-targetDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the target's connection stayed open after the client left")
	}
}
