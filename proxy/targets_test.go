package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/serve-zone/ingress/routetable"
)

// The tests' targets, one family: backend (a net/http handler, countingBackend also
// counting its connections) or rawServer (a function per accepted connection, for
// answers net/http would not write); every scenario's target is built on one of them
// (newH1Target, newWireTarget, wsEcho...). targetOf makes a route's target of an address
// and deadAddr is one nothing listens on.

// targetOf is the route target at addr, its lease named after the port.
func targetOf(t testing.TB, addr string) routetable.Target {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return routetable.Target{LeaseID: "lease-" + port, Address: host, Port: p}
}

// backend starts an httptest server and returns its "127.0.0.1:port".
func backend(t testing.TB, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://")
}

// countingBackend is an httptest target that counts the connections it accepted.
func countingBackend(t testing.TB, h http.Handler) (addr string, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://"), conns
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// rawServer listens on loopback and runs handle for every accepted connection in its own
// goroutine, closing the connection when handle returns. The test's cleanup closes the
// listener and every open connection and waits for the goroutines.
func rawServer(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	return ln.Addr().String()
}
