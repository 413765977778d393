package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestShutdownClosesWebSocketsAtDeadline(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{wsEcho(t)}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+e.http+"/", &websocket.DialOptions{Host: "ws.example.test", HTTPClient: e.h1Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	start := time.Now()
	if err := e.srv.Shutdown(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded (a tunnel was open)", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("Shutdown did not wait for the tunnel (%v)", d)
	}
	if _, _, err := c.Read(ctx); err == nil {
		t.Fatalf("tunnel still open after the forced close")
	}
	e.waitServed(t)
}

func TestAccessLogNamesNoCredential(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	e := newEnv(t, func(c *Config) { c.AccessLog = zap.New(core) })
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	// The query is logged (as nginx's and Caddy's access logs do; an operator needs it to
	// tell requests apart); credentials in header fields never are.
	req, _ := http.NewRequest("GET", "http://app.example.test/p?q=visible", nil)
	req.Header.Set("Authorization", "Bearer s3cr3t-bearer")
	req.Header.Set("Proxy-Authorization", "Basic s3cr3t-proxy")
	res, err := e.h1Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	waitFor(t, "access log line", func() bool { return logs.Len() == 1 })
	entry := logs.All()[0]
	line := fmt.Sprint(entry.Message, entry.ContextMap())
	if strings.Contains(line, "s3cr3t") {
		t.Errorf("access log leaks a secret: %s", line)
	}
	m := entry.ContextMap()
	if m["host"] != "app.example.test" || m["status"] != int64(200) || m["path"] != "/p" || m["query"] != "q=visible" || m["lease"] == "" {
		t.Errorf("access log fields %v", m)
	}
}
