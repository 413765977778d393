package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
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
