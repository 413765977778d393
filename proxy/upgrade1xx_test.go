package proxy

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/routetable"
)

// earlyHintsThen101 is a WebSocket target that answers an upgrade with 103 Early Hints
// (twice) before its 101, in separate writes, then echoes the tunnel's bytes.
func earlyHintsThen101(t *testing.T) string {
	return rawServer(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		sum := sha1.Sum([]byte(req.Header.Get("Sec-Websocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		for range 2 {
			if _, err := io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </app.css>; rel=preload\r\n\r\n"); err != nil {
				return
			}
		}
		if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: "+
			base64.StdEncoding.EncodeToString(sum[:])+"\r\n\r\n"); err != nil {
			return
		}
		_, _ = io.Copy(c, br)
	})
}

// TestUpgradeAfterEarlyHints: a target that answers a WebSocket upgrade with 103 Early
// Hints and then 101 gets a tunnel on every protocol (the 1xx rule of every exchange,
// upstream.Limits.Interim, with 101 final for an upgrade), not "103, then an empty 200".
func TestUpgradeAfterEarlyHints(t *testing.T) {
	e := newEnv(t, withHTTP3)
	be := earlyHintsThen101(t)
	e.apply([]routeSpec{
		{host: "ws.example.test", backends: []string{be}},
		{host: "wss.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{be}},
	}, certSpec{"c1", []string{"wss.example.test"}})

	echo := func(t *testing.T, rw io.ReadWriter) {
		t.Helper()
		for i := range 3 {
			msg := fmt.Sprintf("through the tunnel %d", i)
			if _, err := io.WriteString(rw, msg); err != nil {
				t.Fatalf("write: %v", err)
			}
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(rw, got); err != nil || string(got) != msg {
				t.Fatalf("echo %d: %q, %v", i, got, err)
			}
		}
	}

	t.Run("HTTP/1.1", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", e.http, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		_, err = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: ws.example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(res.Header.Get("Upgrade"), "websocket") {
			t.Fatalf("answer %d %v, want 101 to websocket", res.StatusCode, res.Header)
		}
		echo(t, struct {
			io.Reader
			io.Writer
		}{br, c})
	})

	t.Run("HTTP/2", func(t *testing.T) {
		res, w := extendedConnect(t, e.http, "ws.example.test", "/ws", "websocket", "sec-websocket-version", "13")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("status %d, want 200", res.StatusCode)
		}
		echo(t, struct {
			io.Reader
			io.Writer
		}{res.Body, w})
		_ = w.Close()
	})

	t.Run("HTTP/3", func(t *testing.T) {
		str := h3WebSocket(t, e, "wss.example.test")
		echo(t, str)
		_ = str.Close()
	})

	if st := e.stat("ws.example.test"); st.BackendFailures.Handshake != 0 || st.BackendFailures.Request != 0 {
		t.Errorf("failures counted: %+v", st.BackendFailures)
	}
}
