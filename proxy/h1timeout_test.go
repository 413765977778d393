package proxy

import (
	"errors"
	"io"
	"net"
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
