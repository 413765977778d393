package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/routetable"
)

// TestH3WebSocketSurvivesSwaps: a WebSocket over HTTP/3 (RFC 9220 extended CONNECT)
// reaches an HTTP/1.1 WebSocket target, echoes through five table swaps (one of which
// removes its route), and is counted as one request with its bytes.
func TestH3WebSocketSurvivesSwaps(t *testing.T) {
	e := newEnv(t, withHTTP3)
	be := wsEcho(t)
	other := backend(t, echoInfo())
	wsRoute := routeSpec{host: "ws.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{be}}
	cert := certSpec{"c1", []string{"ws.example.test"}}
	e.apply([]routeSpec{wsRoute}, cert)

	str := h3WebSocket(t, e, "ws.example.test")
	echo := func(i int) {
		t.Helper()
		msg := fmt.Sprintf("message %d", i)
		if err := wsFrame(str, 1, []byte(msg)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		op, b, err := wsRead(str)
		if err != nil || op != 1 || string(b) != msg {
			t.Fatalf("read %d: %d %q %v", i, op, b, err)
		}
	}
	echo(0)
	for i := 1; i <= 5; i++ {
		routes := []routeSpec{wsRoute, {host: fmt.Sprintf("r%d.example.test", i), backends: []string{other}}}
		if i == 3 {
			e.apply(routes[1:]) // the tunnel's target, route and certificate disappear
		} else {
			e.apply(routes, cert)
		}
		echo(i)
	}
	var code [2]byte
	binary.BigEndian.PutUint16(code[:], 1000)
	if err := wsFrame(str, 8, code[:]); err != nil {
		t.Fatal(err)
	}
	if op, _, err := wsRead(str); err != nil || op != 8 {
		t.Fatalf("close answer: %d %v", op, err)
	}
	_ = str.Close()
	if _, err := io.Copy(io.Discard, str); err != nil {
		t.Fatalf("stream end: %v", err)
	}
	waitFor(t, "tunnel bytes", func() bool {
		st := e.stat("ws.example.test")
		return st.Requests == 1 && st.BytesIn > 6*10 && st.BytesOut > 6*10 && e.totals.Snapshot().WebSockets == 0
	})
}

// h3WebSocket opens a WebSocket over HTTP/3 (RFC 9220) to host through e's HTTP/3
// listener and returns its stream once the ingress answered 200.
func h3WebSocket(t *testing.T, e *env, host string) *http3.RequestStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	qc, err := quic.DialAddr(ctx, e.srv.HTTP3Addr().String(),
		&tls.Config{InsecureSkipVerify: true, ServerName: host, NextProtos: []string{http3.NextProtoH3}}, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qc.CloseWithError(0, "") })
	cc := (&http3.Transport{}).NewClientConn(qc)
	select {
	case <-cc.ReceivedSettings():
	case <-ctx.Done():
		t.Fatal("no SETTINGS")
	}
	if !cc.Settings().EnableExtendedConnect {
		t.Fatal("the server does not announce extended CONNECT")
	}
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodConnect, "https://"+host+"/ws", nil)
	req.Proto = "websocket"
	req.Header.Set("Sec-WebSocket-Version", "13")
	if err := str.SendRequestHeader(req); err != nil {
		t.Fatal(err)
	}
	res, err := str.ReadResponse()
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	return str
}
