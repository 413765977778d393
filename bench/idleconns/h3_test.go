package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/serve-zone/ingress/bench/internal/loadtool"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// h3Server is an in-process HTTP/3 server on 127.0.0.1 with a self-signed certificate for
// bench.test. It answers HTTP/3 requests for bench.test with 200 and counts the QUIC
// connections it accepted and the requests per client address (one address per connection).
type h3Server struct {
	addr  string
	conns atomic.Int64
	mu    sync.Mutex
	reqs  map[string]int
}

func startH3Server(t *testing.T) *h3Server {
	t.Helper()
	cert, _, err := loadtool.SelfSigned("bench.test")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &h3Server{addr: pc.LocalAddr().String(), reqs: map[string]int{}}
	srv := &http3.Server{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ConnContext: func(ctx context.Context, _ *quic.Conn) context.Context {
			s.conns.Add(1)
			return ctx
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.reqs[r.RemoteAddr]++
			s.mu.Unlock()
			if r.ProtoMajor != 3 || r.Host != "bench.test" {
				http.Error(w, r.Proto+" for "+r.Host, http.StatusBadRequest)
				return
			}
			_, _ = w.Write([]byte("ok"))
		}),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(pc) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, quic.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		_ = pc.Close()
	})
	return s
}

// requests returns how many client addresses made requests and, for each, how many.
func (s *h3Server) requests() (addrs int, perAddr []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.reqs {
		perAddr = append(perAddr, n)
	}
	return len(s.reqs), perAddr
}

// TestOpenHTTP3: -h3 holds N QUIC connections, each after one request, and each held
// connection is still open afterwards: a second request on it is answered on the same
// connection (no new QUIC connection, from the same client address).
func TestOpenHTTP3(t *testing.T) {
	srv := startH3Server(t)
	const n = 10
	held, err := open(h3, srv.addr, "bench.test", "/64", n)
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := srv.requests()
	if len(held) != n || srv.conns.Load() != n || addrs != n {
		t.Fatalf("%d held, %d QUIC connections accepted, requests from %d addresses; want %d of each", len(held), srv.conns.Load(), addrs, n)
	}
	if got := stillOpen(held); got != n {
		t.Fatalf("%d of %d connections still open", got, n)
	}
	for i, c := range held {
		if err := c.(*h3Conn).get(); err != nil {
			t.Fatalf("second request on connection %d: %v", i, err)
		}
	}
	addrs, perAddr := srv.requests()
	if srv.conns.Load() != n || addrs != n {
		t.Fatalf("after the second requests: %d QUIC connections, %d addresses; want %d", srv.conns.Load(), addrs, n)
	}
	for _, k := range perAddr {
		if k != 2 {
			t.Fatalf("requests per connection %v, want 2 each", perAddr)
		}
	}
}

// TestOpenHTTP3Refuses: a server that answers anything but 200 fails the open, as does a
// non-loopback address.
func TestOpenHTTP3Refuses(t *testing.T) {
	srv := startH3Server(t)
	for _, tt := range []struct{ name, addr, host string }{
		{"non-loopback", "192.0.2.1:443", "bench.test"},
		{"status 400", srv.addr, "other.test"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conns, err := open(h3, tt.addr, tt.host, "/", 2)
			for _, c := range conns {
				_ = c.Close()
			}
			if err == nil || len(conns) != 0 {
				t.Fatalf("open: %d held, %v; want an error and none held", len(conns), err)
			}
		})
	}
}
