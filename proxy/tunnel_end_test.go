package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// upgradeThenSend is a target that accepts any upgrade, sends body as the tunnel's bytes
// right behind its 101 and closes the connection: the end of a tunnel whose last bytes
// may still be in flight to the client when both directions have ended.
func upgradeThenSend(t *testing.T, body []byte) string {
	return backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_, _ = bw.Write(body)
		_ = bw.Flush()
	}))
}

// TestTunnelCleanEndDeliversAll: when both directions of a tunnel end cleanly (the
// client's END_STREAM or FIN, then the target's close), every byte the target sent
// reaches the client, followed by a clean end of the stream, never a reset that
// overtakes the last bytes (QUIC delivers a RESET_STREAM ahead of unacknowledged data).
func TestTunnelCleanEndDeliversAll(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: more than a window
	check := func(t *testing.T, got []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", len(got), len(body), err)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("got %d bytes, want the target's %d", len(got), len(body))
		}
	}
	t.Run("h3", func(t *testing.T) {
		e := newEnv(t, withHTTP3)
		be := upgradeThenSend(t, body)
		e.apply([]routeSpec{{host: "ws.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{be}}},
			certSpec{"c1", []string{"ws.example.test"}})
		for range 3 {
			str := h3WebSocket(t, e, "ws.example.test")
			_ = str.Close() // our FIN first: the tunnel ends as soon as the target's bytes are written
			got, err := io.ReadAll(str)
			check(t, got, err)
		}
	})
	t.Run("h2", func(t *testing.T) {
		e := newEnv(t)
		be := upgradeThenSend(t, body)
		e.apply([]routeSpec{{host: "ws.example.test", backends: []string{be}}})
		for range 3 {
			res, pw := extendedConnect(t, e.http, "ws.example.test", "/ws", "websocket", "sec-websocket-version", "13")
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d", res.StatusCode)
			}
			_ = pw.Close()
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			check(t, got, err)
		}
	})
}

// TestTunnelEndsAfterTheTarget: when the target ends a tunnel (its close after the
// WebSocket close handshake) and the client never ends its side (Chromium 148 over
// HTTP/2 sends no END_STREAM after it), the tunnel still closes, tunnelFinWait after
// the target's end, on each protocol; every byte the target sent arrives first.
func TestTunnelEndsAfterTheTarget(t *testing.T) {
	const host = "ws.example.test"
	body := []byte("\x88\x06\x03\xe8done") // a close frame: 1000 "done"
	e := newEnv(t, withHTTP3)
	e.apply([]routeSpec{{host: host, tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{upgradeThenSend(t, body)}}},
		certSpec{"c1", []string{host}})
	ended := func(t *testing.T, got []byte, err error) {
		t.Helper()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read %q, %v; want the target's %q and a clean end", got, err, body)
		}
		testwait.UntilWhy(t, 5*tunnelFinWait, "the tunnel closed after the target's end", func() (bool, string) {
			n := e.totals.Snapshot().WebSockets
			return n == 0, fmt.Sprint(n, " open")
		})
	}
	t.Run("h1", func(t *testing.T) {
		c, err := net.Dial("tcp", e.http)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: "+host+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", res, err)
		}
		got, err := io.ReadAll(br) // our FIN after the target's bytes; we never send ours
		ended(t, got, err)
	})
	t.Run("h2", func(t *testing.T) {
		res, _ := extendedConnect(t, e.http, host, "/ws", "websocket", "sec-websocket-version", "13")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d", res.StatusCode)
		}
		got, err := io.ReadAll(res.Body) // up to END_STREAM; the client never sends its own
		ended(t, got, err)
	})
	t.Run("h3", func(t *testing.T) {
		str := h3WebSocket(t, e, host)
		got, err := io.ReadAll(str)
		ended(t, got, err)
	})
}
