package h2

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/testcert"
)

// testServer serves the engine on a loopback listener, h2c with prior knowledge or TLS
// with ALPN h2.
type testServer struct {
	addr   string
	tls    *tls.Config // client side, nil for h2c
	conns  atomic.Int64
	parks  atomic.Int64 // Serve or Resume returned ErrParked
	mu     sync.Mutex
	active map[*Conn]struct{}
	served chan error // each connection's Serve result
}

func startServer(t testing.TB, cfg Config, h Handler, useTLS bool) *testServer {
	t.Helper()
	return startServerWrapped(t, cfg, h, useTLS, nil)
}

// startServerWrapped is startServer with wrap applied to every accepted connection
// (after TLS) before the engine gets it.
func startServerWrapped(t testing.TB, cfg Config, h Handler, useTLS bool, wrap func(net.Conn) net.Conn) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: ln.Addr().String(), active: map[*Conn]struct{}{}, served: make(chan error, 1024)}
	var srvTLS *tls.Config
	if useTLS {
		certPEM, keyPEM, err := testcert.Generate("localhost", "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		if err != nil {
			t.Fatal(err)
		}
		srvTLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
		ts.tls = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				if srvTLS != nil {
					tc := tls.Server(nc, srvTLS)
					_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
					if err := tc.HandshakeContext(ctx); err != nil {
						nc.Close()
						return
					}
					_ = tc.SetDeadline(time.Time{})
					nc = tc
				}
				if wrap != nil {
					nc = wrap(nc)
				}
				c := NewConn(nc, cfg, h)
				ts.mu.Lock()
				ts.active[c] = struct{}{}
				ts.mu.Unlock()
				ts.conns.Add(1)
				err := c.Serve(ctx)
				for errors.Is(err, ErrParked) {
					// Config.ParkAfter: a caller without a parker resumes at once
					// (the read loop then waits for the next frame, or parks again).
					ts.parks.Add(1)
					err = c.Resume()
				}
				ts.mu.Lock()
				delete(ts.active, c)
				ts.mu.Unlock()
				select {
				case ts.served <- err:
				default:
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		cancel()
		wg.Wait()
	})
	return ts
}

// shutdown starts a graceful stop of every connection.
func (ts *testServer) shutdown() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for c := range ts.active {
		c.Shutdown()
	}
}

// dial opens a raw connection to the server (TLS negotiated when it is a TLS one).
func (ts *testServer) dial(t testing.TB) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	if ts.tls != nil {
		tc := tls.Client(nc, ts.tls)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		nc = tc
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// echoHandler answers 200 with "hello" for GET and the request body for the rest,
// with the request's trailers as response trailers.
var echoHandler = HandlerFunc(func(st *Stream) {
	r := st.Request()
	body, err := io.ReadAll(st)
	if err != nil {
		return
	}
	if r.Method == "GET" || r.Method == "HEAD" {
		body = []byte("hello, h2spec! this is a response body.")
	}
	tr := st.Trailers()
	fields := []hpack.HeaderField{{Name: "content-type", Value: "text/plain"}}
	if tr == nil {
		fields = append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	}
	if err := st.WriteHead(200, fields, body, tr == nil); err != nil {
		return
	}
	if tr != nil {
		_ = st.Close(tr)
	}
})
