package relay

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestPongsKeepAnIdleSocketOpen(t *testing.T) {
	o := fastOpts()
	o.PingInterval = 20 * time.Millisecond
	o.IdleTimeout = 200 * time.Millisecond
	pr := newPair(t, o, o, nil, nil)
	select {
	case <-pr.client.Done():
		t.Fatalf("client closed although pongs arrived: %v", waitErr(t, pr.clientErr))
	case <-pr.server.Done():
		t.Fatalf("server closed although pongs arrived: %v", waitErr(t, pr.serverErr))
	case <-time.After(5 * o.IdleTimeout):
	}
}

func TestNoPongClosesAfterIdleTimeout(t *testing.T) {
	// The raw side never reads, so it never answers a ping.
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) { <-ctx.Done() })
	o := fastOpts()
	o.PingInterval = 20 * time.Millisecond
	o.IdleTimeout = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := Dial(ctx, url, o)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p.Run(ctx)
	if !errors.Is(err, ErrClosed) || !strings.Contains(err.Error(), "no pong or message") {
		t.Fatalf("Run = %v, want an idle ErrClosed", err)
	}
	if d := time.Since(start); d < o.IdleTimeout || d > 2*time.Second {
		t.Fatalf("closed after %s, want about %s", d, o.IdleTimeout)
	}
}

// A message over the limit closes the socket (1009) without a panic, and the Peer reports
// the closure. The frame comes from the relay side, as a huge route table would.
func TestOversizedMessageClosesCleanly(t *testing.T) {
	const size = 65 << 20
	closeStatus := make(chan websocket.StatusCode, 1)
	url := rawServer(t, func(ctx context.Context, c *websocket.Conn) {
		frame := make([]byte, size)
		copy(frame, `{"method":"big","request":{"blob":"`)
		for n := 64; n < size; n *= 2 { // doubling copies: fast even under the race detector
			copy(frame[n:], frame[64:n])
		}
		err := c.Write(ctx, websocket.MessageText, frame)
		if err == nil {
			_, _, err = c.Read(ctx)
		}
		closeStatus <- websocket.CloseStatus(err)
	})
	// Reading 64 MiB under the race detector on a loaded 2-core machine takes over 20 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := Dial(ctx, url, fastOpts())
	if err != nil {
		t.Fatal(err)
	}
	err = p.Run(ctx)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, websocket.ErrMessageTooBig) {
		t.Fatalf("Run = %v, want ErrClosed for a too big message", err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Done not closed")
	}
	if got := <-closeStatus; got != websocket.StatusMessageTooBig {
		t.Fatalf("sender saw close status %v, want 1009", got)
	}
}

func TestDial(t *testing.T) {
	var paths []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		p, err := Accept(w, r, fastOpts())
		if err != nil {
			return
		}
		p.Handle("hello", func(context.Context, json.RawMessage) (any, error) { return map[string]string{"tls": "yes"}, nil })
		_ = p.Run(r.Context())
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the unknown-CA dial below fails its handshake on purpose
	srv.StartTLS()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	o := fastOpts()
	o.TLSConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	p, err := Dial(ctx, srv.URL, o) // https://127.0.0.1:PORT -> wss://127.0.0.1:PORT/typedrequest
	if err != nil {
		t.Fatalf("Dial over TLS: %v", err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- p.Run(context.Background()) }()
	raw, err := p.Call(ctx, "hello", nil)
	if err != nil {
		t.Fatalf("Call over TLS: %v", err)
	}
	jsonEqual(t, "response", raw, `{"tls":"yes"}`)
	p.Close()
	<-runErr
	if len(paths) != 1 || paths[0] != Path {
		t.Fatalf("dialled paths %v, want [%s]", paths, Path)
	}

	// Without the test CA the handshake fails: system roots are used.
	if _, err := Dial(ctx, srv.URL, fastOpts()); err == nil {
		t.Fatal("Dial trusted an unknown CA")
	}
	for _, bad := range []string{"ftp://127.0.0.1", "127.0.0.1:80", "https://", "::"} {
		if _, err := Dial(ctx, bad, fastOpts()); err == nil {
			t.Fatalf("Dial(%q) succeeded", bad)
		}
	}
}
