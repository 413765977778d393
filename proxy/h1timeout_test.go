package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"
)

// TestH1FastPathUnreadResponseIsCut: on the fast HTTP/1.1 path a client that never reads
// a 10 MiB answer is cut after ClientSendTimeout: its connection and the target's close,
// the request is recorded as 499 and no backend failure is counted.
func TestH1FastPathUnreadResponseIsCut(t *testing.T) {
	const size = 10 << 20
	var logs *observer.ObservedLogs
	e := newEnv(t, withProgressTimeouts(&logs))
	opened, closed := make(chan struct{}, 4), make(chan struct{}, 4)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{bigTarget(t, size, opened, closed)}}})

	c := dialRaw(t, e.http)
	_ = c.(*net.TCPConn).SetReadBuffer(8 << 10)
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: app.example.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	recv(t, "target answering", opened, 1, 10*time.Second)
	recv(t, "target connection closed", closed, 1, 10*time.Second)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the client's connection was left open (%d bytes read)", n)
	}
	if n >= size {
		t.Errorf("the client got all %d bytes", n)
	}
	waitStatuses(t, logs, 1, statusClientClosed)
	noBackendFailures(t, e)
}

// TestH1FastPathSlowSmallBody: a body small enough for the fast path that stops arriving
// is answered 408 after ClientBodyTimeout, on a kept-alive connection too (where the idle
// timeout used to apply), and the refusal has its access-log line; so has a malformed
// head's 400.
func TestH1FastPathSlowSmallBody(t *testing.T) {
	var logs *observer.ObservedLogs
	e := newEnv(t, withProgressTimeouts(&logs), func(c *Config) { c.IdleTimeout = time.Minute })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	rc.send(get1("/pre"))
	if res, _ := rc.read("GET"); res.StatusCode != 200 {
		t.Fatalf("pre: %d", res.StatusCode)
	}
	start := time.Now()
	rc.send("POST /slow HTTP/1.1\r\nHost: " + h1Host + "\r\nContent-Length: 4000\r\n\r\nxx")
	res, _ := rc.read("POST")
	if res.StatusCode != http.StatusRequestTimeout || !res.Close {
		t.Fatalf("slow body: %d (close %v), want 408 and the connection closed", res.StatusCode, res.Close)
	}
	if d := time.Since(start); d > 10*progressTimeout {
		t.Errorf("408 after %s, want about %s", d, progressTimeout)
	}
	waitFor(t, "two access lines", func() bool { return logs.Len() >= 2 })
	if got := statuses(logs); len(got) != 2 || got[0] != 200 || got[1] != http.StatusRequestTimeout {
		t.Errorf("access log statuses %v, want [200 408]", got)
	}
	logs.TakeAll()

	// A malformed head's refusal is logged too, with its reason.
	bad := newRawClient(t, e.http)
	bad.send("POST /hop HTTP/1.1\r\nHost: " + h1Host + "\r\nConnection: Content-Length\r\nContent-Length: 2\r\n\r\nxx")
	if res, _ := bad.read("POST"); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed head: %d, want 400", res.StatusCode)
	}
	waitFor(t, "the refusal's access line", func() bool { return logs.Len() >= 1 })
	a := logs.All()[0].ContextMap()
	if a["status"] != int64(400) || a["path"] != "/hop" || !strings.Contains(a["error"].(string), "malformed") {
		t.Errorf("refusal's access line %v", a)
	}
}

// TestH2PrefaceOnlyFirst: the prior-knowledge HTTP/2 preface is taken only as the first
// bytes of a plain connection; in the middle of an HTTP/1.1 connection, or on TLS that
// negotiated http/1.1, it is a malformed request.
func TestH2PrefaceOnlyFirst(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	rc.send(get1("/one") + "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	if res, _ := rc.read("GET"); res.StatusCode != 200 {
		t.Fatalf("first request: %d", res.StatusCode)
	}
	if res, _ := rc.read("GET"); res.StatusCode != http.StatusBadRequest || !res.Close {
		t.Errorf("preface mid-connection: %d (close %v), want 400 and the connection closed", res.StatusCode, res.Close)
	}
	// As the first bytes of a plain connection it still starts HTTP/2.
	res, _ := get(t, e.h2cClient(), "http://"+h1Host+"/h2c", "")
	if res.StatusCode != 200 || res.ProtoMajor != 2 {
		t.Errorf("h2c: %d over HTTP/%d", res.StatusCode, res.ProtoMajor)
	}
}
